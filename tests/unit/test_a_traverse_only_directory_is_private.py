"""The mode check at start (jobd/filemodes.py) names what others may read or list, and not
a directory others may only pass through (0711): a root worker opens its own directories
so to the owners of its jobs, on the way to their output files, and lists nothing to
anyone by it. A file with the same bits, or a directory others may list, is still named.
"""

from __future__ import annotations

from pathlib import Path

from jobd.filemodes import PRIVATE, too_wide


def test_only_what_others_may_read_or_list_is_named(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "jobs" / "7-1").mkdir(parents=True)
    for directory in (root, root / "jobs", root / "jobs" / "7-1"):
        directory.chmod(0o711)
    (root / "jobs" / "7-1" / "spec.json").write_text("{}")
    (root / "jobs" / "7-1" / "spec.json").chmod(0o600)
    (root / "jobs" / "7-1" / "stdout").write_text("")
    (root / "jobs" / "7-1" / "stdout").chmod(0o611)  # x bits on a file: still wide
    (root / "listed").mkdir(mode=0o755)
    (root / "listed").chmod(0o755)

    named = {path.relative_to(tmp_path): mode for path, mode in too_wide([root], PRIVATE)}
    assert named == {Path("state/jobs/7-1/stdout"): 0o611, Path("state/listed"): 0o755}
