"""Fast JSON responses: resource documents serialized once, by pydantic's core.

Returning plain dicts would make FastAPI walk every document again (jsonable_encoder
and response validation) on the hottest paths — a create, a worker's report, a watch.
Routes here build a Response whose body embeds each document's own JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Response
from pydantic import BaseModel

__all__ = ["RawJSON", "doc", "json_response"]


class RawJSON(str):
    """JSON text to embed as it is."""


def doc(obj: BaseModel) -> RawJSON:
    """A resource's document, as users see it (CONTRACT.md §3)."""
    return RawJSON(obj.model_dump_json(by_alias=True, exclude_none=True))


def _encode(value: Any) -> str:
    if isinstance(value, RawJSON):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    return json.dumps(value)


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(_encode(content), status_code=status_code, media_type="application/json")
