"""The manifests a `-f` names, read and validated before anything is sent.

Shared by the verbs that take `-f` (apply, diff, and those acting on the jobs a file
names), so a bad file is refused the same way everywhere: its file, line and field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from jobd.api.manifests import load_path, parse_resource
from jobd.api.models import dump
from jobd.cli.failure import warn

__all__ = ["load_manifests"]

Document = dict[str, Any]


def load_manifests(paths: Sequence[str]) -> list[Document]:
    """Every document of every file, validated here so an error names file and line.

    A directory's hidden entries and files that hold no jobd document are left out, with
    a note on stderr. Files are read fast, without positions, and read again with them
    only to name the line of an error (jobd.api.manifests). A relative `spec.cwd` means
    relative to where `job` runs, as `job submit --cwd` does: the worker cannot know the
    directory the user meant.
    """
    docs = [
        dump(parse_resource(doc))
        for path in paths
        for doc in load_path(path, note=lambda text: warn(f"note: {text}"), positions=False)
    ]
    for doc in docs:
        spec = doc.get("spec", {})
        if doc.get("kind") == "Job" and spec.get("cwd") and not os.path.isabs(spec["cwd"]):
            spec["cwd"] = os.path.abspath(spec["cwd"])
    return docs
