"""The manager on a FakeClock: a controller whose first listing of keys fails keeps running.

The failure is logged and the listing retried after the queue's backoff; the other
controllers go on meanwhile. Time is the fake clock's, so the retry and the lease timer
that follows it fire when the test advances it.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio
import pytest
from structlog.testing import capture_logs

from jobd.api.models import WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context
from jobd.controllers.manager import Manager
from jobd.controllers.verbs.worker_lease import register_worker

pytestmark = pytest.mark.anyio

LEASE_S = 15.0
BASE_BACKOFF_S = 0.05  # the work queue's default


def _phase(ctx: Context, name: str) -> str:
    worker = ctx.store.get_worker(name)
    assert worker is not None
    return worker.status.phase


async def test_a_failing_first_listing_is_retried_and_its_keys_then_reconciled(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    register_worker(ctx, "w", WorkerSpec(lease_duration_s=LEASE_S), "host", "procgroup")
    manager = Manager(ctx)  # subscribes after the registration: only a listing finds "w"
    workers = manager.controllers["workers"]
    listings: list[float] = []
    list_workers = workers.keys_all

    def flaky_keys_all() -> Iterable[str]:
        listings.append(clock.monotonic())
        if len(listings) == 1:
            raise OSError("the store is unreachable")
        return list_workers()

    monkeypatch.setattr(workers, "keys_all", flaky_keys_all)
    with capture_logs() as logs, anyio.fail_after(10):  # a guard against a hang
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run)
            await anyio.wait_all_tasks_blocked()
            assert listings == [0.0]
            clock.advance(BASE_BACKOFF_S)
            await anyio.wait_all_tasks_blocked()
            assert listings == [0.0, BASE_BACKOFF_S]
            # "w" was reconciled once listed: its lease timer is pending, not yet due.
            clock.advance(LEASE_S - BASE_BACKOFF_S - 0.5)
            await anyio.wait_all_tasks_blocked()
            assert _phase(ctx, "w") == "Ready"
            clock.advance(1.0)
            await anyio.wait_all_tasks_blocked()
            assert _phase(ctx, "w") == "Lost", "the lease timer fired on the fake clock"
            tg.cancel_scope.cancel()
    [failure] = [e for e in logs if e["event"] == "resync_failed"]
    assert failure["controller"] == "workers" and failure["retry_s"] == BASE_BACKOFF_S
