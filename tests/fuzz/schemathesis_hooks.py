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

MAX_HOLD_S = 1.0
_HOLDING = {"/watch", "/events", "/jobs/{job_id}/logs"}


@schemathesis.hook
def map_case(_context: Any, case: Any) -> Any:
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
