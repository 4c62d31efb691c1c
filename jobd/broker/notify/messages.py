"""One notification: its body in the target's format, and the headers that go with it.

A notification tells of one phase a job reached, as an event committed it (its `seq`):
`Idempotency-Key` is the job's uid, that seq and the target, the same on every try and after a
broker restart, so a receiver drops what it already has. With a secret, the body is
signed as GitHub signs webhooks: `X-Jobd-Signature: sha256=<hex HMAC-SHA256 of the
body>`.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_core import to_json

from jobd.api.models import Job

__all__ = ["Notification", "body_of", "headers_of", "idempotency_key", "sign", "summary"]


@dataclass(frozen=True)
class Notification:
    """A phase `job` reached, as the event numbered `seq` recorded it."""

    seq: int
    phase: str
    job: Job


def body_of(note: Notification, fmt: str) -> bytes:
    """The request body: the json document, or one line for Slack or Discord."""
    if fmt == "slack":
        return to_json({"text": summary(note)})
    if fmt == "discord":
        return to_json({"content": summary(note)})
    return to_json(_document(note))


def idempotency_key(note: Notification, sink: str) -> str:
    """The same on every try and after a restart: the job's uid, the event, the target.

    `sink` names the target (`webhook-0`, `notify-1`): one event may reach one receiver
    through two targets, each a notification of its own.
    """
    return f"{note.job.metadata.uid or note.job.id}-{note.seq}-{sink}"


def headers_of(key: str, phase: str, body: bytes, secret: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "jobd-notify/1",
        "Idempotency-Key": key,
        "X-Jobd-Event": phase,
    }
    if secret:
        headers["X-Jobd-Signature"] = sign(body, secret)
    return headers


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def summary(note: Notification) -> str:
    """One line for people: `job 12 (vision/resnet) Failed: exit 1, on gpu-box-1`."""
    job, status = note.job, note.job.status
    said = [f"exit {status.exit_code}"] if status.exit_code is not None else []
    if status.reason:
        said.append(status.reason)
    if status.worker:
        said.append(f"on {status.worker}")
    tail = f": {', '.join(said)}" if said else ""
    return f"jobd: job {job.id} ({job.metadata.project}/{job.metadata.name}) {note.phase}{tail}"


def _document(note: Notification) -> dict[str, Any]:
    job, status = note.job, note.job.status
    return {
        "event": "job_phase",
        "phase": note.phase,
        "job": {
            "id": job.id,
            "name": job.metadata.name,
            "project": job.metadata.project,
            "uid": job.metadata.uid,
            "ref": f"{job.metadata.project}/{job.metadata.name}",
        },
        "reason": status.reason,
        "message": status.message,
        "exit_code": status.exit_code,
        "worker": status.worker,
        "attempt": status.attempt,
        "created_at": _time(job.metadata.created_at),
        "started_at": _time(status.started_at),
        "finished_at": _time(status.finished_at),
        "seq": note.seq,
        "text": summary(note),
    }


def _time(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None
