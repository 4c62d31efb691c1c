"""FastAPI route decorators from the wire's declarations, so a path is spelled once.

`route(router, routes.GET_JOB)` is `router.get(<its path>, summary=<its summary>)`: the
method, path, summary and success status of `jobd.wire.routes`. The busiest routes are
declared through `fastpath.declare` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

from jobd.wire.routes import Route

__all__ = ["route"]

_F = TypeVar("_F", bound=Callable[..., Any])


def route(router: APIRouter, declared: Route, **options: Any) -> Callable[[_F], _F]:
    """Decorate an endpoint as the route `declared`; `options` go to FastAPI as they are."""
    options.setdefault("summary", declared.summary)
    if declared.status != 200:
        options.setdefault("status_code", declared.status)
    decorate: Callable[[_F], _F] = router.api_route(
        declared.path, methods=[declared.method], **options
    )
    return decorate
