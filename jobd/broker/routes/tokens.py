"""Admin routes for tokens: make one (the answer is the only place it is ever shown),
list them without their secrets, revoke one (refused from the very next request)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from jobd.broker.auth.tokens import token_info
from jobd.broker.http.responses import json_response
from jobd.broker.http.routing import route
from jobd.broker.state import state_of
from jobd.logconfig import get_logger
from jobd.wire import routes
from jobd.wire.models import TokenCreated, TokenRequest

__all__ = ["router"]

router = APIRouter(tags=["tokens"])
log = get_logger()


@route(router, routes.CREATE_TOKEN)
async def create_token(request: Request, body: TokenRequest) -> Response:
    state = state_of(request)
    token, record = state.tokens.create(body)
    log.info("token_created", label=record.label, role=record.role)  # never the token
    created = TokenCreated(token=token, **token_info(record).model_dump())
    return json_response(created.model_dump(), status_code=201)


@route(router, routes.LIST_TOKENS)
async def list_tokens(request: Request) -> Response:
    state = state_of(request)
    state.tokens.flush()  # the times held in memory first: a listing shows them current
    records = state.store.list_tokens()
    return json_response({"items": [token_info(r).model_dump() for r in records]})


@route(router, routes.REVOKE_TOKEN)
async def revoke_token(request: Request, label: str) -> Response:
    state_of(request).tokens.revoke(label)
    log.info("token_revoked", label=label)
    return json_response({"revoked": label})
