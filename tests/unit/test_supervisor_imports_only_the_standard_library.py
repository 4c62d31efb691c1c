"""The supervisor imports nothing but the standard library (nothing of jobd's but itself).

It runs under the agent's interpreter yet must start fast and keep working whatever the
agent's dependencies do; checked in a fresh interpreter, where nothing is imported yet.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
before = set(sys.modules)
import jobd.worker.supervisor
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_supervisor_imports_only_the_standard_library() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, check=True, text=True
    ).stdout
    loaded = json.loads(out)
    jobd_modules = {name for name in loaded if name.split(".")[0] == "jobd"}
    assert jobd_modules == {"jobd", "jobd.worker", "jobd.worker.supervisor"}
    others = {name.split(".")[0] for name in loaded} - {"jobd"}
    assert others, "the probe saw no imports at all"
    assert others <= sys.stdlib_module_names, others - sys.stdlib_module_names
