"""The manifests a `-f` names, read and validated before anything is sent.

Shared by the verbs that take `-f` (apply, diff, and those acting on the jobs a file
names), so a bad file is refused the same way everywhere: its file, line and field.

A big file (thousands of jobs) is read and validated in parts, one process per core
while the broker waits anyway: the parts are whole YAML documents, cut where a line
holds only `---`, which YAML reserves for that. Anything unusual in a part (an error, a
directive) sends the whole file down the one-process path, which reads it exactly as
before and names the line of an error.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from jobd.api.manifests import ManifestError, load_documents, load_path, parse_resource
from jobd.api.models import dump
from jobd.cli.failure import warn

__all__ = ["load_manifests"]

Document = dict[str, Any]

# Below this a second process costs more than it saves (a fork, pickling the results).
PARALLEL_BYTES = 512 * 1024
_MAX_PARTS = 4
_DOCUMENT_START = re.compile(r"^---(?=[ \t]|\r?$)", re.MULTILINE)


def load_manifests(paths: Sequence[str]) -> list[Document]:
    """Every document of every file, validated here so an error names file and line.

    A directory's hidden entries and files that hold no jobd document are left out, with
    a note on stderr. Files are read fast, without positions, and read again with them
    only to name the line of an error (jobd.api.manifests). A relative `spec.cwd` means
    relative to where `job` runs, as `job submit --cwd` does: the worker cannot know the
    directory the user meant.
    """
    docs = [doc for path in paths for doc in _validated_file(path)]
    for doc in docs:
        spec = doc.get("spec", {})
        relative = spec.get("cwd") and not os.path.isabs(spec["cwd"])
        if doc.get("kind") in ("Job", "JobArray") and relative:
            spec["cwd"] = os.path.abspath(spec["cwd"])
    return docs


def _validated_file(path: str) -> list[Document]:
    parts = _parts(Path(path)) if path != "-" else None
    if parts is not None:
        found = _validated_in_parallel(parts, path)
        if found is not None:
            return found
    docs = load_path(path, note=lambda text: warn(f"note: {text}"), positions=False)
    return [dump(parse_resource(doc)) for doc in docs]


def _parts(path: Path) -> list[str] | None:
    """A big file's text cut into whole documents, a part per core; None: read it whole."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
    cores = min(len(usable), _MAX_PARTS)
    if cores < 2 or not path.is_file() or path.stat().st_size < PARALLEL_BYTES:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # the one-process path says what is wrong
    cuts = [0]
    for i in range(1, cores):
        found = _DOCUMENT_START.search(text, max(cuts[-1] + 1, len(text) * i // cores))
        if found is not None and found.start() > cuts[-1]:
            cuts.append(found.start())
    return [text[a:b] for a, b in zip(cuts, [*cuts[1:], len(text)], strict=True)]


def _validated_in_parallel(parts: list[str], source: str) -> list[Document] | None:
    """Each part read and validated in its own process (the first in this one); None if
    any part failed or parallel reading cannot be had here."""
    if len(parts) < 2 or "%" in "".join(p[:1] for p in parts):
        return None
    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        return None
    try:
        pool = ProcessPoolExecutor(len(parts) - 1, mp_context=context)
    except (OSError, NotImplementedError):  # no semaphores here (no /dev/shm): one process
        return None
    with pool:
        others = [pool.submit(_validated_part, part, source) for part in parts[1:]]
        first = _validated_part(parts[0], source)
        try:
            found = [first, *(f.result() for f in others)]
        except BrokenProcessPool:  # a part's process died (out of memory?): read it whole
            return None
    if any(part is None for part in found):
        return None
    return [doc for part in found for doc in part or []]


def _validated_part(text: str, source: str) -> list[Document] | None:
    try:
        return [dump(parse_resource(d)) for d in load_documents(text, source, positions=False)]
    except ManifestError:
        return None
