"""`__all__` is each module's public face: what jobd's modules import from one another is
listed there, and what is listed there exists. (ruff's RUF022 keeps each list sorted.)

Read from the source with ast, so the check imports nothing and costs milliseconds.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jobd"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "migrations" not in p.parts}


def _top_level(path: Path) -> Iterator[ast.stmt]:
    """A module's statements, with those of top-level `if` and `try` blocks."""
    pending = list(ast.parse(path.read_text()).body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.If | ast.Try):
            pending[:0] = [*node.body, *node.orelse]
        else:
            yield node


@functools.cache  # read once per module, not once per import of it
def _exported(path: Path) -> list[str]:
    """The literal `__all__` of a module; a module without one exports nothing."""
    for node in _top_level(path):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def _defined(path: Path) -> set[str]:
    """Names bound at a module's top level: definitions, assignments, imports."""
    names: set[str] = set()
    for node in _top_level(path):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _imports(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of every `from jobd... import name` in a file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jobd"):
            for alias in node.names:
                yield node.lineno, node.module or "", alias.name


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_modules_all_names_only_what_it_defines(module: str) -> None:
    undefined = set(_exported(MODULES[module])) - _defined(MODULES[module])
    assert not undefined, f"{module}.__all__ names what it does not define"


def test_imports_take_only_names_a_module_exports() -> None:
    offenders = []
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    for path in sorted(sources):
        in_tests = path.is_relative_to(ROOT / "tests")
        for line, module, name in _imports(path):
            if f"{module}.{name}" in MODULES or module not in MODULES:
                continue  # a submodule, not a name
            if in_tests and name.startswith("_"):
                continue  # a test may reach a private helper on purpose
            if name not in _exported(MODULES[module]):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {module}.{name}")
    assert offenders == []


def test_the_check_sees_a_name_missing_from_all(tmp_path: Path) -> None:
    """The test above can fail: a module whose __all__ lacks an imported name is caught."""
    module = tmp_path / "m.py"
    module.write_text('__all__ = ["a"]\na = 1\nif True:\n    b = 2\n')
    assert _exported(module) == ["a"] and {"a", "b"} <= _defined(module)
