"""The few broker calls the scenarios share: job documents, creating, waiting for events.

Every wait here is bounded: it gives up at the caller's deadline and says so.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import anyio
import httpx

from jobd.wire import routes

__all__ = ["PROJECT", "TRUE", "UNRUNNABLE", "cancel_all", "create_job", "job_doc", "wait_event"]

PROJECT = "bench"
TRUE = shutil.which("true") or "/bin/true"
# For a --server that has workers: a job no worker can take, so it only exercises the API.
UNRUNNABLE: dict[str, Any] = {"resources": {"gpus": 64}}


def job_doc(
    name: str | None = None,
    command: list[str] | None = None,
    project: str = PROJECT,
    **spec: Any,
) -> dict[str, Any]:
    """A Job document (in the bench project unless told); extra keywords go into its spec."""
    metadata: dict[str, Any] = {"project": project}
    if name is not None:
        metadata["name"] = name
    return {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"command": command or [TRUE], **spec},
    }


async def create_job(http: httpx.AsyncClient, doc: dict[str, Any]) -> int:
    resp = await http.post(routes.CREATE_JOB.url(), json=doc)
    return int(resp.json()["metadata"]["id"])


async def wait_event(
    http: httpx.AsyncClient, job: int, event: str, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The first `event` recorded for `job`, long-polling the event record until it comes."""
    deadline = time.monotonic() + timeout_s
    params: dict[str, Any] = {"job": job, "type": event, "follow": "true", "limit": 1}
    while (left := deadline - time.monotonic()) > 0:
        params["timeout"] = round(min(left, 5.0), 3)
        resp = await http.get(routes.LIST_EVENTS.url(), params=params)
        items: list[dict[str, Any]] = resp.json()["items"]
        if items:
            return items[0]
    raise TimeoutError(f"no {event} event for job {job} within {timeout_s:.0f} s")


async def cancel_all(http: httpx.AsyncClient, ids: list[int], clients: int = 32) -> None:
    """Cancel what the bench left queued on someone else's broker, `clients` at a time."""
    pending = iter(ids)

    async def cancel_some() -> None:
        for job in pending:
            await http.post(routes.CANCEL_JOB.url(job_id=job))

    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(cancel_some)
