"""Signing in to the dashboard: the API route `job ui` calls for a one-time code, the page
that trades the code for a session cookie, signing out, and the check every other page
makes (`signed_in`), which leaves the session's principal where the API's handlers find
a token's (access.PRINCIPAL), so the same access rules apply to both.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse

from jobd.broker.auth.access import PRINCIPAL, principal_of
from jobd.broker.http.responses import json_response
from jobd.broker.http.routing import route
from jobd.broker.ui.rendering import HEADERS, NoSession, PageRoute, page
from jobd.broker.ui.sessions import CODE_TTL_S, COOKIE, SESSION_TTL_S, Sessions
from jobd.wire import routes
from jobd.wire.routes import DASHBOARD

__all__ = ["api", "public", "session_lasts", "sessions_of", "signed_in", "signed_in_router"]

api = APIRouter(tags=["dashboard"])
public = APIRouter(route_class=PageRoute, include_in_schema=False)


def sessions_of(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.ui_sessions
    return sessions


async def signed_in(request: Request) -> None:
    """A dependency of every page but these: the session's principal, or NoSession (401)."""
    who = sessions_of(request).principal(request.cookies.get(COOKIE))
    if who is None:
        raise NoSession()
    request.scope[PRINCIPAL] = who


def session_lasts(request: Request) -> bool:
    """Whether the request's session is still valid: what a live stream asks as it goes on,
    so a revoked token's open pages stop receiving."""
    return sessions_of(request).principal(request.cookies.get(COOKIE)) is not None


def signed_in_router() -> APIRouter:
    """A router of pages for a signed-in session only; refusals shown as pages."""
    return APIRouter(
        route_class=PageRoute, include_in_schema=False, dependencies=[Depends(signed_in)]
    )


@route(api, routes.LOGIN_CODE)
async def login_code(request: Request) -> Response:
    code = sessions_of(request).mint_code(principal_of(request))
    answer = {"code": code, "path": f"{DASHBOARD.login}?code={code}", "expires_in_s": CODE_TTL_S}
    return json_response(answer, status_code=201)


@public.get(DASHBOARD.login)
async def login(request: Request, code: Annotated[str, Query(max_length=256)] = "") -> Response:
    cookie = sessions_of(request).redeem(code)
    if cookie is None:
        return page("login_failed.html", 400, who=None)
    done = RedirectResponse(DASHBOARD.jobs, status_code=303, headers=HEADERS)
    done.set_cookie(
        COOKIE,
        cookie,
        max_age=int(SESSION_TTL_S),
        path=routes.UI_PREFIX,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return done


@public.post(DASHBOARD.logout)
async def logout(request: Request) -> Response:
    sessions_of(request).end(request.cookies.get(COOKIE))  # a copy of the cookie ends too
    gone = page("login_needed.html", 200, who=None, signed_out=True)
    gone.delete_cookie(COOKIE, path=routes.UI_PREFIX, httponly=True, samesite="strict")
    return gone
