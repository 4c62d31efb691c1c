"""The busiest routes, answered by one function whichever way a request reaches them.

`POST /jobs` (a storm of submits), and what every worker sends all the time: `GET
/watch`, `POST /workers/{name}/reports` and `POST /workers/{name}/heartbeat`. FastAPI's
routing, dependency and response machinery took more CPU per request than the work these
carry, so `FastRoutes`, a plain ASGI middleware ahead of FastAPI's routing, answers them.

Each is declared once, as a `FastRoute`: the wire's route (method, path, body or query
model, status) and a handler. From that one declaration `declare()` makes the FastAPI
route that documents it in the OpenAPI schema, and `FastRoutes` matches it. Both parse,
call the handler and map errors through `answer()`, so the two cannot answer differently;
only how the bytes arrive and leave differs. Everything else passes through untouched.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin
from urllib.parse import parse_qsl

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobd.api.models import ADMISSION
from jobd.broker.auth.access import PRINCIPAL
from jobd.broker.auth.tokens import Principal
from jobd.broker.http import bodylimit, protocol_check, standby
from jobd.broker.http.responses import status_for, validation_detail
from jobd.broker.http.routing import error_responses
from jobd.broker.state import BrokerState, state_of
from jobd.wire.routes import PATH_PARAMS, ROUTES, Route, find_route, parse_path_param

__all__ = [
    "FastRoute",
    "FastRoutes",
    "PathArgs",
    "answer",
    "declare",
    "parse_body",
    "parse_value",
    "query_values",
]

_JSON_TYPE = "application/json"
_JSON = [(b"content-type", _JSON_TYPE.encode())]

PathArgs = dict[str, Any]
# (state, the path's parameters, the parsed body or query, who asks) -> the answer's JSON text
Handler = Callable[[BrokerState, PathArgs, Any, Principal], Awaitable[str]]


@dataclass(frozen=True)
class FastRoute:
    route: Route
    handle: Handler
    description: str | None = None  # for the OpenAPI document, beside the route's summary


async def answer(
    fast: FastRoute,
    state: BrokerState,
    args: PathArgs,
    body: bytes,
    query: bytes,
    who: Principal,
) -> tuple[int, bytes]:
    """The status and JSON body of a fast route's answer.

    The body was capped on its way in (broker/http/bodylimit.py)."""
    route = fast.route
    try:
        if route.body is not None:
            parsed: Any = parse_body(route.body, body)
        elif route.query is not None:
            parsed = route.query.model_validate(query_values(route.query, query))
        else:
            parsed = None
        text = await fast.handle(state, args, parsed, who)
    except ValidationError as exc:
        return 422, _detail(validation_detail(exc.errors()))
    except Exception as exc:
        refused = status_for(exc)
        if refused is None:
            raise  # a bug: the server's error handling takes it from here
        return refused, _detail(str(exc))
    return route.status, text.encode()


def query_values(model: type[BaseModel], query: bytes) -> dict[str, Any]:
    """The query's parameters by name, as FastAPI's own parsing takes them: every value of
    a list field, the last of any other repeated one. `timeout=` says an empty value,
    refused as FastAPI's routes refuse it."""
    lists = _list_fields(model)
    values: dict[str, Any] = {}
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name in lists:
            values.setdefault(name, []).append(value)
        else:
            values[name] = value
    return values


@functools.cache
def _list_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if list in (get_origin(field.annotation), *map(get_origin, get_args(field.annotation)))
    )


def parse_body(model: type[BaseModel], body: bytes) -> Any:
    """A request body as `model`, under admission's rules (api.models), its JSON types
    taken as JSON Schema defines them: no "1" for 1 nor 1 for true (strict), but 3.0 is
    the integer 3, as the schema's `integer` says.

    Strict parsing refuses 3.0 for an integer; only then, on that refusal, is the body
    read again with such numbers made integers, so a well-formed body pays nothing.
    """
    try:
        return model.model_validate_json(body, strict=True, context=ADMISSION)
    except ValidationError as exc:
        if not any(e["type"] == "int_type" and type(e["input"]) is float for e in exc.errors()):
            raise
    return parse_value(model, json.loads(body))


def parse_value(model: type[BaseModel], value: Any) -> Any:
    """A JSON value already parsed, as `model`, by the rules of parse_body."""
    text = json.dumps(_integral(value))
    return model.model_validate_json(text, strict=True, context=ADMISSION)


def _integral(value: Any) -> Any:
    """`value` with every float that holds an integer (3.0, 1e3) made that integer."""
    if type(value) is float:
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


class FastRoutes:
    """The broker's one ASGI layer after the token check: the checks every request meets
    on its way to FastAPI, then the fast routes, answered ahead of FastAPI's routing.

    In order, each in the module that owns it: a worker payload's protocol (426,
    protocol_check.py), the body caps (413, bodylimit.py), a standby's redirect of writes
    (307 or 503, standby.py); then the path parameters of every route of the wire
    (`ROUTES`), fast or not: a parameter no route takes (a job id of 2^63, a worker name
    with a capital) is answered 422 here, naming it, whatever the handler. They were a
    layer each; as one, a request is looked up once and pays one hop, not four (a few
    thousand instructions a create, docs/performance.md).
    """

    def __init__(self, app: ASGIApp, state: BrokerState, routes: Sequence[FastRoute]) -> None:
        self.app = app
        self.state = state
        self.leadership = state.leadership
        self._fast = {f.route: f for f in routes}
        # Where each templated route's parameters sit in its path's segments.
        self._params = {
            route: [(i, s[1:-1]) for i, s in enumerate(route.path.split("/")) if s[:1] == "{"]
            for route in ROUTES
            if route.params
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = find_route(scope["method"], scope["path"])
        refused = protocol_check.refusal(scope, route)
        if refused is not None:
            await protocol_check.refuse(send, *refused)
        elif bodylimit.cap_needed(scope):
            await bodylimit.capped(functools.partial(self._serve, route), scope, receive, send)
        else:
            await self._serve(route, scope, receive, send)

    async def _serve(self, route: Route | None, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in standby.READS and not self.leadership.is_leader:
            await standby.redirect(scope, receive, send, self.leadership)
            return
        found = self._match(route, scope["path"]) if route is not None else None
        if found is None:
            await self.app(scope, receive, send)
            return
        if isinstance(found, bytes):
            await _send(send, 422, found)
            return
        fast, args = found
        body = await _read_body(receive) if fast.route.body is not None else b""
        query = scope.get("query_string", b"")
        status, text = await answer(fast, self.state, args, body, query, scope[PRINCIPAL])
        await _send(send, status, text)

    def _match(self, route: Route, path: str) -> tuple[FastRoute, PathArgs] | bytes | None:
        """The fast route and its arguments; a refusal's body; None: FastAPI's to answer."""
        fast = self._fast.get(route)
        if not route.params:
            return (fast, {}) if fast is not None else None
        parts = path.split("/")
        if any(not parts[i] for i, _ in self._params[route]):
            return None  # `/jobs//cancel` is no route's: a 404
        try:  # ASGI paths come percent-decoded.
            args = {name: parse_path_param(name, parts[i]) for i, name in self._params[route]}
        except ValueError as exc:
            return _detail(str(exc))
        return (fast, args) if fast is not None else None


# -- the FastAPI side: documentation from the same declaration, answered by answer()


class _AnsweredByFastPath(APIRoute):
    """A route FastAPI documents from its endpoint's signature but answers with answer()."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        fast: FastRoute = self.endpoint.fast  # type: ignore[attr-defined]

        async def handler(request: Request) -> Response:
            body = await request.body() if fast.route.body is not None else b""
            try:
                args = {k: parse_path_param(k, v) for k, v in request.path_params.items()}
            except ValueError as exc:
                return Response(_detail(str(exc)), 422, media_type=_JSON_TYPE)
            query = request.scope.get("query_string", b"")
            who = request.scope[PRINCIPAL]
            status, text = await answer(fast, state_of(request), args, body, query, who)
            return Response(text, status_code=status, media_type=_JSON_TYPE)

        return handler


def declare(router: APIRouter, fast: FastRoute) -> None:
    """Add `fast` to `router`, so the OpenAPI document shows it with its models."""
    route = fast.route

    async def endpoint(**_kwargs: Any) -> None:  # never called: see _AnsweredByFastPath
        raise NotImplementedError

    endpoint.__signature__ = _signature(route)  # type: ignore[attr-defined]
    endpoint.fast = fast  # type: ignore[attr-defined]
    endpoint.__name__ = fast.handle.__name__.lstrip("_")
    router.add_api_route(
        route.path,
        endpoint,
        methods=[route.method],
        status_code=route.status,
        summary=route.summary,
        description=fast.description,
        responses=error_responses(route),
        route_class_override=_AnsweredByFastPath,
    )


def _signature(route: Route) -> inspect.Signature:
    """What FastAPI reads to document the route: its path parameters, body or query model."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter(p, keyword, annotation=PATH_PARAMS[p]) for p in route.params]
    if route.body is not None:
        params.append(inspect.Parameter("body", keyword, annotation=_annotated(route.body, Body())))
    if route.query is not None:
        params.append(
            inspect.Parameter("query", keyword, annotation=_annotated(route.query, Query()))
        )
    return inspect.Signature(params)


def _annotated(model: type[BaseModel], marker: Any) -> Any:
    return Annotated[model, marker]


async def _read_body(receive: Receive) -> bytes:
    """The whole request body (capped by broker/http/bodylimit.py, ahead of this)."""
    chunks: list[bytes] = []
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _detail(message: str) -> bytes:
    return json.dumps({"detail": message}).encode()


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [*_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
