"""A serving shim runs as the agent starts it — `python -I -S`, jobd's directory alone on
sys.path — and imports nothing but the standard library and jobd.worker.shim, counted
while a real job runs through it.

Every import is seen: `-X importtime` reports each one on stderr as it happens, the
shim's start on the pipe and the rest (once it has taken the job's log as its stderr) in
the shared log file, lazy imports during the job included.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobd.worker.shim.client.pool import serve_command
from jobd.worker.shim.protocol import LOG_FILE, STATUS_FILE, LaunchRequest, LaunchSpec

ALLOWED_JOBD = {"jobd", "jobd.worker", "jobd.worker.shim"}
# Tried and failed by the standard library itself (copy.py looks for Jython's PyStringMap).
STDLIB_PROBES = {"org"}


def _imported(importtime: str) -> set[str]:
    """Module names of `-X importtime` lines: `import time: self | cumulative | name`."""
    names = set()
    for line in importtime.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                names.add(name)
    return names


def _run_one_job(state_root: Path) -> tuple[set[str], str]:
    """Start a serving shim as the agent does (with -X importtime), run `true` through it
    to its end, close its pipe; the modules imported, and the shim's replies."""
    argv = serve_command()
    argv[1:1] = ["-X", "importtime"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": "/nowhere"}
    spec = LaunchSpec(["true"], "/", {"PATH": "/usr/bin:/bin"}, 5.0, 1, 1)
    request = LaunchRequest(1, str(state_root / "1-1"), spec).encode()
    shim = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert shim.stdin is not None and shim.stdout is not None
    shim.stdin.write(request)
    shim.stdin.flush()
    replies = [shim.stdout.readline(), shim.stdout.readline()]  # started, then its end
    shim.stdin.close()  # the shim, idle, exits
    assert shim.stderr is not None
    stderr = shim.stderr.read()
    shim.wait(timeout=30)
    shim_log = (state_root / LOG_FILE).read_text()
    return _imported(stderr.decode() + shim_log), b"".join(replies).decode()


def test_a_serving_shim_is_started_isolated_and_without_site() -> None:
    argv = serve_command()
    assert argv[:3] == [sys.executable, "-I", "-S"]


def test_a_served_job_imports_only_the_standard_library_and_the_shim(tmp_path: Path) -> None:
    modules, replies = _run_one_job(tmp_path)
    assert replies.splitlines()[-1] == "1 end idle", replies
    assert (tmp_path / "1-1" / STATUS_FILE).exists()
    assert "jobd.worker.shim.lifecycle" in modules  # the job's own code was seen loading
    assert "site" not in modules
    # Each of these is 0.4-3 MiB of every shim's RSS (with what it imports in turn): typing
    # is annotations only (a TYPE_CHECKING block), the records are no dataclasses, paths are
    # strings, JSON is the C accelerator's, times come from `time`, signals from `_signal`,
    # and the limits' and owners' modules come with the first job that names them.
    heavy = {"typing", "dataclasses", "pathlib", "json", "re", "datetime", "contextlib"}
    heavy |= {"enum", "ctypes", "inspect", "threading", "collections", "functools"}
    assert not heavy & modules, heavy & modules
    assert not {"jobd.worker.shim.limits", "jobd.worker.shim.owner"} & modules
    jobd = {m for m in modules if m.split(".")[0] == "jobd"}
    outside_the_shim = jobd - ALLOWED_JOBD - {m for m in jobd if m.startswith("jobd.worker.shim.")}
    assert not outside_the_shim
    assert not {m for m in jobd if m.startswith("jobd.worker.shim.client")}
    others = {m.split(".")[0] for m in modules} - {"jobd"} - STDLIB_PROBES
    assert others <= sys.stdlib_module_names, others - sys.stdlib_module_names
