"""The per-job checkpoint directory contract: where <root> is, what the worker creates there,
what a resume points at, and which stale directories may be swept."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.worker.checkpoints import (
    checkpoint_dir,
    checkpoint_root,
    ensure_checkpoint_dir,
    find_resume_target,
    remove_stale_checkpoints,
)

HOME = "/home/alice"


# --- root resolution ----------------------------------------------------------------------


def test_override_wins_over_xdg() -> None:
    env = {"JOBD_WORKER_CHECKPOINT_ROOT": "/srv/ckpts", "XDG_DATA_HOME": "/xdg", "HOME": HOME}
    assert checkpoint_root(env) == Path("/srv/ckpts")


def test_override_tilde_is_expanded() -> None:
    env = {"JOBD_WORKER_CHECKPOINT_ROOT": "~/ckpts", "HOME": HOME}
    assert checkpoint_root(env) == Path("/home/alice/ckpts")


def test_override_tilde_without_home_in_env_uses_expanduser() -> None:
    env = {"JOBD_WORKER_CHECKPOINT_ROOT": "~/ckpts"}
    assert checkpoint_root(env) == Path(os.path.expanduser("~/ckpts"))


def test_relative_override_is_kept_verbatim() -> None:
    env = {"JOBD_WORKER_CHECKPOINT_ROOT": "scratch/../ckpts", "HOME": HOME}
    root = checkpoint_root(env)
    assert str(root) == "scratch/../ckpts"
    assert not root.is_absolute()


def test_empty_override_is_ignored() -> None:
    env = {"JOBD_WORKER_CHECKPOINT_ROOT": "", "XDG_DATA_HOME": "/xdg", "HOME": HOME}
    assert checkpoint_root(env) == Path("/xdg/jobd/checkpoints")


def test_xdg_data_home_when_set() -> None:
    assert checkpoint_root({"XDG_DATA_HOME": "/xdg", "HOME": HOME}) == Path("/xdg/jobd/checkpoints")


def test_empty_xdg_data_home_falls_back_to_default() -> None:
    assert checkpoint_root({"XDG_DATA_HOME": "", "HOME": HOME}) == Path(
        "/home/alice/.local/share/jobd/checkpoints"
    )


def test_default_uses_home_from_env() -> None:
    assert checkpoint_root({"HOME": HOME}) == Path("/home/alice/.local/share/jobd/checkpoints")


def test_default_without_home_in_env_uses_expanduser() -> None:
    assert checkpoint_root({}) == Path(os.path.expanduser("~/.local/share/jobd/checkpoints"))


# --- the per-job directory ----------------------------------------------------------------


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_dir_is_appended_directly_under_root(tmp_path: Path) -> None:
    assert checkpoint_dir(tmp_path, 42) == tmp_path / "42"
    made = ensure_checkpoint_dir(tmp_path, 42)
    assert made == tmp_path / "42"
    assert made.is_dir()
    assert not (tmp_path / "jobd").exists()


@pytest.mark.usefixtures("umask_zero")
def test_leaf_is_0700_even_with_umask_zero(tmp_path: Path) -> None:
    made = ensure_checkpoint_dir(tmp_path / "missing" / "root", 7)
    assert made.is_dir()
    assert _mode(made) == 0o700


def test_existing_dir_is_tightened_to_0700(tmp_path: Path) -> None:
    (tmp_path / "9").mkdir(mode=0o755)
    os.chmod(tmp_path / "9", 0o755)
    (tmp_path / "9" / "keep.txt").write_text("still here")
    made = ensure_checkpoint_dir(tmp_path, 9)
    assert _mode(made) == 0o700
    assert (made / "keep.txt").read_text() == "still here"


# --- resume targets -----------------------------------------------------------------------


def test_resume_target_is_the_single_latest_file(tmp_path: Path) -> None:
    (tmp_path / "latest.pt").write_bytes(b"ckpt")
    (tmp_path / "step-100.pt").write_bytes(b"old")
    assert find_resume_target(tmp_path) == tmp_path / "latest.pt"


def test_resume_target_any_extension(tmp_path: Path) -> None:
    (tmp_path / "latest.npz").write_bytes(b"ckpt")
    assert find_resume_target(tmp_path) == tmp_path / "latest.npz"


def test_resume_target_is_the_dir_when_ambiguous(tmp_path: Path) -> None:
    (tmp_path / "latest.pt").write_bytes(b"a")
    (tmp_path / "latest.npz").write_bytes(b"b")
    assert find_resume_target(tmp_path) == tmp_path


def test_resume_target_is_the_dir_when_none(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no checkpoint")
    (tmp_path / "latest.d").mkdir()  # a directory is not a checkpoint file
    assert find_resume_target(tmp_path) == tmp_path


def test_resume_target_of_missing_dir_is_itself(tmp_path: Path) -> None:
    assert find_resume_target(tmp_path / "gone") == tmp_path / "gone"


# --- sweeping stale directories -----------------------------------------------------------

NOW = 1_000_000.0
DAY = 86_400.0


def _job_dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir()
        (root / name / "latest.pt").write_bytes(b"x")


def test_removes_only_old_ended_unkept_jobs(tmp_path: Path) -> None:
    _job_dirs(tmp_path, "1", "2", "3", "4", "5")
    ended = {1: NOW - 10 * DAY, 2: NOW - 10 * DAY, 3: NOW - 60.0, 5: NOW - 7 * DAY}
    removed = remove_stale_checkpoints(tmp_path, ended, keep={2}, older_than_s=7 * DAY, now=NOW)
    assert removed == [tmp_path / "1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2", "3", "4", "5"]


def test_never_touches_non_integer_names(tmp_path: Path) -> None:
    _job_dirs(tmp_path, "notes", "7.bak", "007", "-7", " 7")
    (tmp_path / "7").write_text("a file, not a job directory")
    ended = {7: NOW - 100 * DAY}
    assert remove_stale_checkpoints(tmp_path, ended, keep=set(), older_than_s=DAY, now=NOW) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["notes", "7.bak", "007", "-7", " 7", "7"]
    )


def test_does_not_follow_symlinks(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("do not delete")
    root = tmp_path / "root"
    root.mkdir()
    (root / "8").symlink_to(target)
    assert remove_stale_checkpoints(root, {8: 0.0}, keep=set(), older_than_s=DAY, now=NOW) == []
    assert (target / "precious").exists()


def test_missing_root_removes_nothing(tmp_path: Path) -> None:
    assert remove_stale_checkpoints(tmp_path / "none", {1: 0.0}, set(), DAY, NOW) == []
