"""The web dashboard at /ui (docs/dashboard.md): server-rendered pages of the broker's own
state, signed in through `job ui`, kept current by server-sent events.

`login` signs in (a one-time code for a session cookie, `sessions`), `pages` renders
the jobs, a job, the workers and the preemption timeline (`timeline` pairs the events),
`live` streams what changes. Templates and the one script are package data.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from jobd.broker.state import BrokerState
from jobd.broker.ui import live, login, pages
from jobd.broker.ui.sessions import ENDED_FILE, Sessions, load_key
from jobd.wire.routes import DASHBOARD

__all__ = ["install"]


def install(app: FastAPI, state: BrokerState) -> None:
    """The dashboard's routes on `app`: the login-code API route (bearer token) and the
    pages under /ui, which answer to a session cookie instead (auth.py lets them by)."""
    data_dir = state.config.data_dir
    ended = data_dir / ENDED_FILE
    app.state.ui_sessions = Sessions(state.tokens, load_key(data_dir), ended_file=ended)
    app.include_router(login.api)
    app.include_router(login.public)
    app.mount(DASHBOARD.static, StaticFiles(packages=[("jobd.broker.ui", "static")]), "ui-static")
    app.include_router(pages.router)
    app.include_router(live.router)
