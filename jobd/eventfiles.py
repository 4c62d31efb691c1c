"""events.jsonl and its rotated files: their names, and reading them oldest first.

The broker rotates `events.jsonl` by size (broker/streams/eventlog.py): the live file
becomes `events.jsonl.1`, `.1` becomes `.2`, and so on up to the number kept. A line is
never split across two files: a rotation happens only between whole writes. Standard
library only, so `job events --file` reads the files without the broker's dependencies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["files_oldest_first", "read_events", "rotated"]


def rotated(path: Path, n: int) -> Path:
    """The n-th rotated file of `path` (1: the newest rotated one)."""
    return path.with_name(f"{path.name}.{n}")


def files_oldest_first(path: Path) -> list[Path]:
    """`path`'s rotated files that exist, oldest first, then `path` itself if it exists."""
    found: list[tuple[int, Path]] = []
    prefix = path.name + "."
    if path.parent.is_dir():
        for candidate in path.parent.iterdir():
            suffix = candidate.name.removeprefix(prefix)
            if candidate.name.startswith(prefix) and suffix.isdigit():
                found.append((int(suffix), candidate))
    ordered = [p for _, p in sorted(found, reverse=True)]
    return [*ordered, path] if path.exists() else ordered


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every event of `path` and its rotated files, oldest first.

    A line that is not a JSON object (a half line a crash left at the live file's end) is
    skipped: the broker's events table has that event.
    """
    for file in files_oldest_first(path):
        with file.open("rb") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    yield event
