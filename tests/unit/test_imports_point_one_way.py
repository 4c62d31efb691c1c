"""The layers of docs/architecture.md, held: no package imports one above it.

cli -> http -> wire -> api; broker -> wire, controllers -> store -> api; worker -> wire ->
api. Read from the source with ast (function-level imports included), so a lazy import
cannot slip a layer either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What each package must never import (by module prefix).
FORBIDDEN = {
    "jobd.api": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.worker", "jobd.wire"],
    "jobd.store": ["jobd.controllers", "jobd.broker", "jobd.worker", "jobd.wire", "jobd.cli"],
    "jobd.controllers": ["jobd.broker", "jobd.worker", "jobd.wire", "jobd.cli", "jobd.http"],
    "jobd.wire": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.worker", "jobd.cli"],
    "jobd.worker": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.cli"],
    "jobd.broker": ["jobd.worker", "jobd.cli"],
}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_above_it(package: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _files(package)
        for name in sorted(_imported(path))
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package])
    ]
    assert offenders == []
