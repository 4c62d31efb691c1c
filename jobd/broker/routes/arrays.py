"""Job array routes: create an array with its members, read, cancel and delete it whole.

Thin, as every route module: admission is controllers/verbs/arrays.py. An array's
document is answered with its status as reads show it (`verbs.arrays.summary`): the
members' ids, their count per phase and a line per member.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from jobd.api.arrays import JobArray
from jobd.api.models import Job
from jobd.broker.auth import access
from jobd.broker.auth.access import principal_of
from jobd.broker.auth.tokens import Principal
from jobd.broker.http.fastpath import FastRoute, PathArgs, declare
from jobd.broker.http.responses import encode_json, json_response
from jobd.broker.http.routing import route
from jobd.broker.state import BrokerState, state_of
from jobd.controllers.verbs import admission, arrays
from jobd.store.base import NotFound
from jobd.wire import routes
from jobd.wire.models import ArraysQuery

__all__ = ["FAST", "array_document", "router"]

router = APIRouter(tags=["arrays"])


def array_document(array: JobArray, members: list[Job]) -> dict[str, Any]:
    """The array as users see it: its env values as stored (secrets masked), its status
    with its members' phases."""
    body = array.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["status"] = arrays.summary(array, members)
    return body


async def create_array(state: BrokerState, _path: PathArgs, array: JobArray, who: Principal) -> str:
    if not who.admin:
        access.project(who, array.project)
    access.stamp_owner(who, array)
    view = state.ctx.view
    admission.refuse_root_owner(array, view.projects.get(array.project), state.config.trusted_owner)
    created = arrays.create_array(
        state.store, array, state.ctx.clock, view.projects, view.workers.values()
    )
    return encode_json(array_document(created, arrays.members_of(state.store, created)))


CREATE_ARRAY = FastRoute(routes.CREATE_ARRAY, create_array)
declare(router, CREATE_ARRAY)


def _array(request: Request, array_id: int, changing: bool = False) -> JobArray:
    """The array, if the request's principal may read it (or change it: access.change)."""
    array = state_of(request).store.get_array(array_id)
    if array is None:
        raise NotFound(f"array A{array_id} not found")
    if changing:
        access.change(principal_of(request), array)
    else:
        access.project(principal_of(request), array.project)
    return array


@route(router, routes.LIST_ARRAYS)
async def list_arrays(request: Request, query: Annotated[ArraysQuery, Query()]) -> Response:
    state, who = state_of(request), principal_of(request)
    if query.project is not None:
        access.project(who, query.project)
    found = state.store.list_arrays(
        project=query.project, projects=access.projects(who), name=query.name
    )
    items = [array_document(a, arrays.members_of(state.store, a)) for a in found]
    return json_response({"items": items})


@route(router, routes.GET_ARRAY)
async def get_array(request: Request, array_id: int) -> Response:
    array = _array(request, array_id)
    members = arrays.members_of(state_of(request).store, array)
    return json_response(array_document(array, members))


@route(router, routes.CANCEL_ARRAY)
async def cancel_array(request: Request, array_id: int) -> Response:
    state = state_of(request)
    array = _array(request, array_id, changing=True)
    cancelled = arrays.cancel_array(state.ctx, array)
    body = array_document(array, arrays.members_of(state.store, array))
    body["cancelled"] = [job.id for job in cancelled]
    return json_response(body)


@route(router, routes.DELETE_ARRAY)
async def delete_array(request: Request, array_id: int) -> Response:
    state = state_of(request)
    deleted = arrays.delete_array(state.store, _array(request, array_id, changing=True))
    for job in deleted:
        state.logs.remove(job.id)
    return json_response({"deleted": f"A{array_id}", "jobs": [job.id for job in deleted]})


FAST = (CREATE_ARRAY,)
