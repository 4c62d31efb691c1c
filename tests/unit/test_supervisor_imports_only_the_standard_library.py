"""The shim imports nothing but the standard library (nothing of jobd's outside the shim).

It runs under the agent's interpreter yet must start fast and keep working whatever the
agent's dependencies do; checked in a fresh interpreter, where nothing is imported yet,
for the shim process and every other module of jobd.worker.shim but its client
(the agent's side).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import jobd.worker.shim

PROBE = """
import importlib, json, sys
before = set(sys.modules)
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""

SHIM_MODULES = sorted(
    f"jobd.worker.shim.{info.name}"
    for info in pkgutil.iter_modules(jobd.worker.shim.__path__)
    if info.name != "client"  # the agent's side
)


def test_the_shim_process_is_among_the_probed() -> None:
    assert "jobd.worker.shim.process" in SHIM_MODULES


@pytest.mark.parametrize("module", SHIM_MODULES)
def test_the_supervisor_imports_only_the_standard_library(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, check=True, text=True
    ).stdout
    loaded = json.loads(out)
    jobd_modules = {name for name in loaded if name.split(".")[0] == "jobd"}
    shim_modules = {name for name in jobd_modules if name.startswith("jobd.worker.shim.")}
    assert jobd_modules - shim_modules == {"jobd", "jobd.worker", "jobd.worker.shim"}
    assert "jobd.worker.shim.client" not in shim_modules
    # (the jobd packages above were seen: the probe sees imports; a module may need no more
    # of the standard library than the probe itself loaded)
    others = {name.split(".")[0] for name in loaded} - {"jobd"}
    assert others <= sys.stdlib_module_names, others - sys.stdlib_module_names
