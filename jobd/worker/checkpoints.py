"""Where jobs keep their checkpoints: the per-job directory contract of the preemption protocol.

The worker gives every job its own ``<root>/<job_id>/`` (exported as ``JOBD_CHECKPOINT_DIR``),
created private (0700) before the workload starts. The root comes from the worker's
environment, resolved the same way everywhere so that ``job resume`` and the sweeping of stale
directories find what the workload wrote.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "checkpoint_dir",
    "checkpoint_root",
    "ensure_checkpoint_dir",
    "find_resume_target",
    "remove_stale_checkpoints",
]

_ROOT_OVERRIDE_ENV = "JOBD_WORKER_CHECKPOINT_ROOT"
_DIR_MODE = 0o700
_JOB_ID_NAME = re.compile(r"[0-9]+")


def checkpoint_root(env: Mapping[str, str]) -> Path:
    """Resolve ``<root>``: the override, else ``$XDG_DATA_HOME/jobd/checkpoints``, else ~/.local."""
    override = env.get(_ROOT_OVERRIDE_ENV, "")
    if override:
        # The override is the literal root: tilde-expanded but otherwise verbatim, as documented.
        return Path(_expand_user(override, env))
    xdg_data_home = env.get("XDG_DATA_HOME", "")
    if xdg_data_home:
        return Path(xdg_data_home) / "jobd" / "checkpoints"
    return Path(_expand_user("~/.local/share/jobd/checkpoints", env))


def checkpoint_dir(root: Path, job_id: int) -> Path:
    """The job's own directory, directly under the root."""
    return root / str(job_id)


def ensure_checkpoint_dir(root: Path, job_id: int) -> Path:
    """Create the job's directory (and missing parents) and make it private to the worker user."""
    path = checkpoint_dir(root, job_id)
    path.mkdir(parents=True, exist_ok=True)
    # mkdir's mode is filtered through the umask, and an existing directory keeps its old mode.
    os.chmod(path, _DIR_MODE)
    return path


def find_resume_target(directory: Path) -> Path:
    """The single ``latest.*`` file in ``directory``, else ``directory`` itself."""
    if not directory.is_dir():
        return directory
    candidates = [p for p in directory.glob("latest.*") if p.is_file()]
    return candidates[0] if len(candidates) == 1 else directory


def remove_stale_checkpoints(
    root: Path,
    ended_before: dict[int, float],
    keep: set[int],
    older_than_s: float,
    now: float,
) -> list[Path]:
    """Delete ``<root>/<id>/`` of jobs that ended long enough ago and no live job resumes from.

    ``ended_before`` maps job id to end time (epoch seconds). Entries that are not canonical
    job-id directories are never touched; directories that cannot be removed are left in place
    and not reported.
    """
    cutoff = now - older_than_s
    removed: list[Path] = []
    for job_id, path in _job_dirs(root):
        ended = ended_before.get(job_id)
        if ended is None or ended >= cutoff or job_id in keep:
            continue
        try:
            shutil.rmtree(path)
        except OSError:
            continue  # one unremovable directory must not stop the sweep
        removed.append(path)
    return removed


def _job_dirs(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        # Only names the worker itself creates: "7", never "007", "7.bak" or a symlink.
        if not _JOB_ID_NAME.fullmatch(entry.name) or str(int(entry.name)) != entry.name:
            continue
        if entry.is_symlink() or not entry.is_dir():
            continue
        found.append((int(entry.name), entry))
    return sorted(found)


def _expand_user(path: str, env: Mapping[str, str]) -> str:
    # "~" means the home of the environment being resolved, which may not be this process's.
    home = env.get("HOME", "")
    if home and (path == "~" or path.startswith("~/")):
        return (home.rstrip("/") + path[1:]) or "/"
    return os.path.expanduser(path)
