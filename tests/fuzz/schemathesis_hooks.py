"""Hooks for the schemathesis run against a real broker (SCHEMATHESIS_HOOKS names this).

The watch, `GET /events?follow=true` and `GET /jobs/{id}/logs?follow=true` hold a request
open up to `timeout` seconds (30 by default, 300 at most) when nothing arrives: that is
what they are for, not a hang. Their timeout is sent as one second when the fuzzer draws
a larger one or none, so a run of many cases stays bounded; every other value, valid or
not, is sent as drawn.

"""

from __future__ import annotations

from typing import Any

import schemathesis

from jobd.api.addresses import check_address

MAX_HOLD_S = 1.0
_HOLDING = {"/watch", "/events", "/jobs/{job_id}/logs"}


@schemathesis.hook
def map_case(_context: Any, case: Any) -> Any:
    meta = getattr(case, "meta", None)
    if meta is not None and meta.generation.mode == "positive":
        _leave_out_refused(case.body)
    if case.method != "GET" or case.operation.path not in _HOLDING:
        return case
    query = dict(case.query or {})
    if _seconds(query.get("timeout", MAX_HOLD_S + 1)) > MAX_HOLD_S:
        query["timeout"] = MAX_HOLD_S
        case.query = query
    return case


def _seconds(value: Any) -> float:
    """The timeout drawn (a number, or its text in some phases); 0 for what is none."""
    if isinstance(value, bool):
        return 0.0
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 0.0
    return seconds if seconds == seconds else 0.0  # NaN is left as drawn


# Two refusals no JSON Schema of ours states, each 422 naming its field: a multi-host job
# pinned to one worker (`spec.worker` with `spec.nodes` > 1: its members run on as many
# workers), and an advertised address nobody can dial (0.0.0.0, a multicast group, a
# dotted number that is no IP). A body drawn as schema-valid is sent without them (the pin
# left out, the address unsaid), so each phase's positive cases stay valid.
def _leave_out_refused(value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _leave_out_refused(item)
        return
    if not isinstance(value, dict):
        return
    nodes = value.get("nodes")  # drawn as 637 or as 637.0: both are a job of 637 nodes
    if isinstance(nodes, (int, float)) and not isinstance(nodes, bool) and nodes > 1:
        value.pop("worker", None)
    if _undialable(value.get("address")):
        value.pop("address")
    for item in value.values():
        _leave_out_refused(item)


def _undialable(address: Any) -> bool:
    if not isinstance(address, str):
        return False
    try:
        check_address(address)
    except ValueError:
        return True
    return False
