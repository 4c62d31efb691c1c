"""`import jobd` is free, and the SDK loads none of the broker's libraries.

The per-job supervisor imports `jobd.worker.shim.*` (hence the `jobd` package) under
`python -I -S`, so the package's `__init__` imports nothing but the standard library and
names the SDK lazily (PEP 562). The SDK itself is a client: a notebook that drives jobs
must not need FastAPI, Starlette, uvicorn, SQLAlchemy or Alembic. Each case runs in a
fresh interpreter, where nothing is imported yet.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
before = set(sys.modules)
exec(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""
SERVER_LIBRARIES = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "uvloop"}


def _loaded(statement: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, statement], capture_output=True, check=True, text=True
    ).stdout
    return set(json.loads(out))


def test_importing_the_package_loads_only_the_standard_library() -> None:
    loaded = _loaded("import jobd")
    tops = {name.split(".")[0] for name in loaded} - {"jobd"}
    assert tops <= sys.stdlib_module_names, tops - sys.stdlib_module_names
    assert {name for name in loaded if name.startswith("jobd")} == {"jobd"}
    assert "typing" not in loaded


@pytest.mark.parametrize(
    "statement",
    [
        "import jobd; jobd.Client; jobd.AsyncClient; jobd.ApiError",
        "import jobd; jobd.Executor; jobd.JobFuture; jobd.JobFailed",
        "import jobd.sdk.runner",
    ],
)
def test_the_sdk_loads_no_server_dependency(statement: str) -> None:
    loaded = _loaded(statement)
    assert "jobd" in loaded or "jobd.sdk.runner" in loaded
    tops = {name.split(".")[0] for name in loaded}
    assert not tops & SERVER_LIBRARIES, tops & SERVER_LIBRARIES
    assert not {n for n in loaded if n.startswith(("jobd.broker", "jobd.store", "jobd.daemon"))}


def test_the_runner_loads_only_the_standard_library() -> None:
    loaded = _loaded("import jobd.sdk.runner")
    tops = {name.split(".")[0] for name in loaded} - {"jobd"}
    assert tops <= sys.stdlib_module_names, tops - sys.stdlib_module_names


def test_an_unknown_name_is_an_attribute_error() -> None:
    import jobd

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        jobd.Nope  # noqa: B018
    assert {"Client", "AsyncClient", "Executor"} <= set(dir(jobd))
