"""Starting shims: one of the job's own (jobd.worker.shim.process under `python -I -S`,
under the containment's command), or a launch sent to one of the agent's serving shims
(jobd.worker.shim.client.pool)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.to_thread

import jobd
from jobd.filemodes import started_umask
from jobd.worker.shim.client.handle import Shim
from jobd.worker.shim.containment import Containment
from jobd.worker.shim.protocol import LOG_FILE, SHIM_MODULE, SPEC_FILE, LaunchSpec, bootstrap
from jobd.worker.shim.statedir import open_append, write_json_atomic

if TYPE_CHECKING:
    from jobd.worker.shim.client.pool import ShimPool

__all__ = ["launch", "prepare", "shim_command", "shim_env", "start_shim"]

# The directory holding the jobd package, so the shim imports the agent's own jobd.
_JOBD_HOME = str(Path(jobd.__file__).resolve().parent.parent)


async def start_shim(
    pool: ShimPool, containment: Containment, state_dir: Path, spec: LaunchSpec
) -> Shim:
    """A shim for spec, contained as containment says: one of the agent's, or one of the job's
    own started under the containment's command (a systemd scope, say)."""
    prefix = containment.shim_command_prefix(spec)
    if prefix is None:
        return await pool.launch(state_dir, spec)
    shim = await anyio.to_thread.run_sync(lambda: launch(state_dir, spec, prefix))
    await shim.started()
    return shim


def prepare(state_dir: Path, spec: LaunchSpec) -> Path:
    """Write spec into a fresh state directory; its resolved path.

    Raises FileExistsError if state_dir already holds a launch (one directory per attempt).
    """
    state_dir = state_dir.resolve()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (state_dir / SPEC_FILE).exists():
        raise FileExistsError(f"{state_dir} already holds a launch")
    # Read by this boot's shim only: no fsync on the way to a launch.
    write_json_atomic(state_dir / SPEC_FILE, spec.to_dict(), durable=False)
    return state_dir


def launch(state_dir: Path, spec: LaunchSpec, prefix: list[str] | None = None) -> Shim:
    """Start a shim of its own for spec in a fresh state directory, in a session of its own.

    `prefix` wraps the shim's command (`systemd-run --user --scope ...`, so the scope holds
    the shim and the whole job). Raises FileExistsError as prepare() does.
    """
    state_dir = prepare(state_dir, spec)
    log = open_append(state_dir.parent / LOG_FILE)
    try:
        child = subprocess.Popen(
            [*(prefix or []), *shim_command(SHIM_MODULE, str(state_dir))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
            env=shim_env(),
            start_new_session=True,  # a signal to the agent's group, or its death, stops here
            umask=started_umask(),  # the workload's, not the daemon's (jobd/filemodes.py)
        )
    finally:
        os.close(log)
    return Shim(state_dir, child=child)


def shim_command(module: str, *args: str) -> list[str]:
    """How a serving shim, or a shim of a job's own, is started: the interpreter with the
    standard library and jobd's own directory only (`-I -S`: no site, no site-packages,
    no PYTHON* variables), running module's main() with args.

    Nothing of the agent's environment runs in a shim (a .pth file, sitecustomize,
    PYTHONSTARTUP), and the interpreter starts on a third of the CPU: 7 ms against 22
    with `site` (measured with an editable install, whose finder loads pathlib and
    importlib.util). `-I` drops PYTHONPATH, so protocol.bootstrap puts jobd's directory
    first itself.
    """
    return [sys.executable, "-I", "-S", "-c", bootstrap(module), _JOBD_HOME, *args]


def shim_env() -> dict[str, str]:
    # No setting of jobd's, above all no token: the shim needs none of them.
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_JOBD_HOME, env.get("PYTHONPATH")]))
    return env
