"""Opt-in removal of old checkpoint directories (the seed keeps everything by default).

A directory `<root>/<id>/` goes when its job ended more than the configured age ago and
no unfinished job resumes from it (its `RESUME_FROM` points inside). A job the broker no
longer knows (deleted) counts as ended when its directory was last modified.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from jobd.api.vocabulary import TERMINAL_PHASES, Phase
from jobd.logconfig import get_logger
from jobd.wire import calls
from jobd.wire.errors import ApiError
from jobd.worker.checkpoints import remove_stale_checkpoints
from jobd.worker.reporting import BrokerLink

__all__ = ["clean_checkpoints_forever", "resumed_ids"]

log = get_logger()
_LIVE = [p.value for p in Phase if p not in TERMINAL_PHASES]


def resumed_ids(root: Path, live_jobs: list[dict[str, Any]]) -> set[int]:
    """Ids of checkpoint directories some unfinished job resumes from."""
    keep = set()
    for doc in live_jobs:
        target = doc.get("spec", {}).get("env", {}).get("RESUME_FROM")
        if not target:
            continue
        try:
            relative = Path(target).relative_to(root)
        except ValueError:
            continue
        if relative.parts and relative.parts[0].isdigit():
            keep.add(int(relative.parts[0]))
    return keep


async def _ended_times(link: BrokerLink, root: Path) -> dict[int, float]:
    ended: dict[int, float] = {}
    for entry in root.iterdir() if root.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            job = await link.client.run(calls.get_job(int(entry.name)))
        except ApiError as exc:
            if exc.status == 404:
                ended[int(entry.name)] = entry.stat().st_mtime
            continue
        finished = job.get("status", {}).get("finished_at")
        if finished:
            ended[int(entry.name)] = datetime.fromisoformat(finished).timestamp()
    return ended


async def clean_once(link: BrokerLink, root: Path, older_than_s: float) -> list[Path]:
    live = await link.client.run(calls.list_jobs(phase=_LIVE))
    keep = resumed_ids(root, live.items)
    ended = await _ended_times(link, root)
    removed = remove_stale_checkpoints(root, ended, keep, older_than_s, time.time())
    for path in removed:
        link.event("checkpoint_dir_removed", int(path.name), path=str(path))
    return removed


async def clean_checkpoints_forever(
    link: BrokerLink, root: Path, older_than_s: float, interval_s: float = 3600
) -> None:
    while True:
        try:
            await clean_once(link, root, older_than_s)
        except Exception as exc:  # a failed sweep must never take the agent down
            log.warning("checkpoint_cleanup_failed", error=str(exc))
        await anyio.sleep(interval_s)
