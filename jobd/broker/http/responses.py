"""Fast JSON responses: resource documents serialized once, by pydantic's core.

Returning plain dicts would make FastAPI walk every document again (jsonable_encoder
and response validation) on the hottest paths — a create, a worker's report, a watch.
Routes here build a Response whose body embeds each document's own JSON text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import Response
from pydantic import BaseModel
from pydantic_core import to_json

from jobd.api.manifests import ManifestError
from jobd.api.models import Job
from jobd.api.secrets import mask_job
from jobd.broker.auth.access import Forbidden, Revoked
from jobd.controllers.errors import AdmissionError, TransitionError
from jobd.store.base import Conflict, Gone, NotFound, StorageFull, StoreUnavailable

__all__ = [
    "ERROR_STATUSES",
    "RawJSON",
    "doc",
    "encode_json",
    "json_response",
    "status_for",
    "validation_detail",
]

# How the exceptions of the layers below become HTTP statuses, for every route; the
# first that matches counts. A storage fault says what failed and where (CONTRACT.md §5):
# 507 for a write the store could not persist, 503 for a store that cannot be reached.
ERROR_STATUSES: tuple[tuple[type[Exception], int], ...] = (
    (StorageFull, 507),
    (StoreUnavailable, 503),
    (Revoked, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (LookupError, 404),
    (Conflict, 409),
    (TransitionError, 409),
    (Gone, 410),
    (AdmissionError, 422),
    (ManifestError, 422),
)


def status_for(exc: Exception) -> int | None:
    """The status for an exception of the layers below; None for anything else (a bug)."""
    return next((status for kind, status in ERROR_STATUSES if isinstance(exc, kind)), None)


def validation_detail(errors: Sequence[Any]) -> str:
    """`field.path: reason` for the first of pydantic's errors, as every route answers."""
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
    reason = "unknown field" if err.get("type") == "extra_forbidden" else err.get("msg", "invalid")
    reason = str(reason).removeprefix("Value error, ")
    return f"{'.'.join(loc) or 'body'}: {reason}"


class RawJSON(str):
    """JSON text to embed as it is."""


def doc(obj: BaseModel, *, reveal: bool = False) -> RawJSON:
    """A resource's document, as users see it (CONTRACT.md §3): a job's secret env values
    masked (api/secrets.py). Only the worker-facing reads of a job's own worker pass
    `reveal` (see `access.reveals`)."""
    if isinstance(obj, Job) and not reveal:
        obj = mask_job(obj)
    return RawJSON(obj.model_dump_json(by_alias=True, exclude_none=True))


def encode_json(value: Any) -> str:
    """JSON text of plain values and RawJSON documents, the latter embedded as they are."""
    return _encode(value)


_SCALARS = (int, float, type(None))  # bool is an int


def _dumps(value: Any) -> str:
    # pydantic's encoder, in Rust: json.dumps costs microseconds of Python per small dict.
    return to_json(value).decode()


def _flat(mapping: dict[Any, Any]) -> bool:
    """Only plain strings and numbers inside: encoded in one call."""
    return all(type(v) is str or isinstance(v, _SCALARS) for v in mapping.values())


def _encode(value: Any) -> str:
    if isinstance(value, RawJSON):
        return str(value)
    if isinstance(value, dict):
        if _flat(value):  # e.g. the many small results of an apply
            return _dumps(value)
        return "{" + ",".join(f"{_dumps(str(k))}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        if all(type(v) is dict and _flat(v) for v in value):
            return _dumps(value)
        return "[" + ",".join(_encode(v) for v in value) + "]"
    return _dumps(value)


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(_encode(content), status_code=status_code, media_type="application/json")
