"""FastAPI route decorators from the wire's declarations, so a path is spelled once.

`route(router, routes.GET_JOB)` is `router.get(<its path>, summary=<its summary>)`: the
method, path, summary, success status and refusals (each with the API's one error body)
of `jobd.wire.routes`. The busiest routes are
declared through `fastpath.declare` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

from jobd.wire.models import ErrorBody
from jobd.wire.routes import STATUS_REASONS, Route

__all__ = ["error_responses", "route"]

_F = TypeVar("_F", bound=Callable[..., Any])


def route(router: APIRouter, declared: Route, **options: Any) -> Callable[[_F], _F]:
    """Decorate an endpoint as the route `declared`; `options` go to FastAPI as they are."""
    options.setdefault("summary", declared.summary)
    options["responses"] = {**error_responses(declared), **options.get("responses", {})}
    if declared.status != 200:
        options.setdefault("status_code", declared.status)
    decorate: Callable[[_F], _F] = router.api_route(
        declared.path, methods=[declared.method], **options
    )
    return decorate


def error_responses(declared: Route) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of the route's refusals: each status, one error body."""
    return {
        status: {"model": ErrorBody, "description": STATUS_REASONS[status]}
        for status in declared.refusals
    }
