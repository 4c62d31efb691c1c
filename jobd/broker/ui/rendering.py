"""How the dashboard's pages are made: Jinja2 templates (autoescaped), their filters,
the headers every page carries, and the route class that shows a refusal as a page.

Templates and static files are package data under `broker/ui/templates` and
`broker/ui/static`: nothing is built, nothing is fetched from elsewhere (the page's
Content-Security-Policy allows only the broker itself).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from jinja2 import ChainableUndefined, Environment, PackageLoader

from jobd.api.sizes import format_size
from jobd.broker.http.responses import status_for, validation_detail
from jobd.wire.routes import DASHBOARD

__all__ = ["HEADERS", "NoSession", "PageRoute", "duration", "fragment", "page"]

HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a login URL's code never leaves in a Referer
    "Cache-Control": "no-store",
}


class NoSession(Exception):
    """The request carries no valid session cookie: the page says to run `job ui` (401)."""


def _parse(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def duration(seconds: Any) -> str:
    """`42s`, `5m`, `3h`, `2d`: as `job get` shows an age."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def age(value: Any) -> str:
    moment = _parse(value)
    if moment is None:
        return "-"
    return duration((datetime.now(UTC) - moment).total_seconds())


def timestamp(value: Any) -> str:
    moment = _parse(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else "-"


def labels(value: Mapping[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((value or {}).items())) or "-"


_ENV = Environment(
    loader=PackageLoader("jobd.broker.ui", "templates"),
    autoescape=True,
    undefined=ChainableUndefined,  # documents leave out what is None
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters.update(
    age=age, timestamp=timestamp, duration=duration, labels=labels, size=format_size
)
_ENV.globals["ui"] = DASHBOARD  # the dashboard's own paths, from the route table


def fragment(template: str, **context: Any) -> str:
    """A template rendered to text: a whole page, or a part a live stream sends."""
    return _ENV.get_template(template).render(**context)


def page(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(fragment(template, **context), status_code, headers=HEADERS)


def refusal_page(exc: Exception) -> HTMLResponse | None:
    """A refusal of the layers below (as the API answers it) or a missing session, as a
    page; None for anything else."""
    if isinstance(exc, NoSession):
        return page("login_needed.html", 401, who=None)
    if isinstance(exc, RequestValidationError):
        detail = validation_detail(exc.errors())
        return page("error.html", 422, who=None, status=422, message=detail)
    status = status_for(exc)
    if status is None:
        return None
    return page("error.html", status, who=None, status=status, message=str(exc))


class PageRoute(APIRoute):
    """A dashboard route: what the API would refuse with a JSON body is shown as a page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await handle(request)
            except Exception as exc:
                shown = refusal_page(exc)
                if shown is None:
                    raise
                return shown

        return handler
