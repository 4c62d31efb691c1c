"""A small tmpfs mounted for a test: a real disk that fills up.

Mounting needs root. Without it the test skips, saying why; as root a mount that fails
skips on a developer's machine and fails under CI=true, so CI cannot pass by not testing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

__all__ = ["fill", "mounted_tmpfs"]


@contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        reason = f"mount -t tmpfs at {path} failed: {mounted.stderr.strip()}"
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file in `directory` until its disk is full; delete it to free the space."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (65536, 1):  # then the last few bytes of the last block
            with suppress(OSError):
                while f.write(b"\0" * size):
                    pass
    return filler
