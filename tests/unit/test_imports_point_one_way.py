"""The layers of docs/architecture.md, held: no package imports one above it.

cli -> wire -> api; daemon -> (broker | worker); broker -> wire, controllers -> store -> api;
worker -> wire -> api. The bench drives real brokers as subprocesses, and measures the
controllers and the store in-process, so it may import those two, but no broker, worker,
CLI or daemon. Read from the source with ast (function-level imports included), so a lazy
import cannot slip a layer either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROGRAMS = ["jobd.daemon", "jobd.bench"]

# What each package must never import (by module prefix).
FORBIDDEN = {
    "jobd.api": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.worker", "jobd.wire"],
    "jobd.store": ["jobd.controllers", "jobd.broker", "jobd.worker", "jobd.wire", "jobd.cli"],
    "jobd.controllers": ["jobd.broker", "jobd.worker", "jobd.wire", "jobd.cli"],
    "jobd.wire": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.worker", "jobd.cli"],
    "jobd.worker": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.cli"],
    "jobd.broker": ["jobd.worker", "jobd.cli"],
    "jobd.cli": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.worker"],
    "jobd.bench": ["jobd.broker", "jobd.worker", "jobd.cli"],
    # The SDK is a client beside the CLI: it shares the CLI's contexts, nothing else of it.
    "jobd.sdk": ["jobd.store", "jobd.controllers", "jobd.broker", "jobd.worker"],
}
FORBIDDEN = {
    package: [*above, *(p for p in _PROGRAMS if p != package)]
    for package, above in FORBIDDEN.items()
}

# Who may import the daemons' assembly: `python -m jobd` (the console script names it in
# pyproject.toml, which is not Python).
MAY_IMPORT_DAEMON = {"jobd/__main__.py"}


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


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _offenders(paths: list[Path], forbidden: list[str]) -> list[str]:
    return [
        f"{_shown(path)} imports {name}"
        for path in paths
        for name in sorted(_imported(path))
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_above_it(package: str) -> None:
    assert _offenders(_files(package), FORBIDDEN[package]) == []


def test_only_the_entry_point_imports_the_daemons_assembly() -> None:
    outside = [
        path
        for path in _files("jobd")
        if not path.is_relative_to(ROOT / "jobd" / "daemon")
        and str(path.relative_to(ROOT)) not in MAY_IMPORT_DAEMON
    ]
    assert _offenders(outside, ["jobd.daemon"]) == []


@pytest.mark.parametrize("lazy", [False, True])
def test_the_cli_importing_the_store_is_caught(tmp_path: Path, lazy: bool) -> None:
    line = "from jobd.store.sql import open_store\n"
    stray = tmp_path / "stray.py"
    stray.write_text(f"def verb() -> None:\n    {line}" if lazy else line)
    assert _offenders([stray], FORBIDDEN["jobd.cli"]) == [f"{stray} imports jobd.store.sql"]
