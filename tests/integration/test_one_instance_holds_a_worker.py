"""One agent instance holds a worker's lease; another is refused until it has run out.

The verbs on a real SQLite store and a fake clock (the e2e test runs the real processes):
a second instance's registration is refused while the lease is live, the holder's own
re-registration is taken (and bumps the epoch), a new instance takes over once the lease
ran out, and the old instance's heartbeat, like one of an older epoch, is refused and
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import Worker, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.verbs.lease_holder import LeaseHeld
from jobd.controllers.verbs.worker_lease import heartbeat, register_worker
from jobd.store.sql import open_store

LEASE_S = 15.0


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    yield Context(store, Settings(), FakeClock())
    store.close()


def _register(ctx: Context, instance: str | None) -> Worker:
    spec = WorkerSpec(slots=1, lease_duration_s=LEASE_S)
    return register_worker(ctx, "w", spec, "host", "procgroup", instance)


def _stored(ctx: Context) -> Worker:
    worker = ctx.store.get_worker("w")
    assert worker is not None
    return worker


def test_another_instance_is_refused_while_the_lease_is_live(ctx: Context) -> None:
    assert _register(ctx, "a").status.epoch == 1
    assert isinstance(ctx.clock, FakeClock)
    ctx.clock.advance(LEASE_S - 1)
    before = _stored(ctx).metadata.resource_version
    with pytest.raises(LeaseHeld, match=r"^worker w is held by another instance \(instance a "):
        _register(ctx, "b")
    assert _stored(ctx).metadata.resource_version == before
    [refused] = ctx.store.list_events(event="worker_instance_refused")
    assert refused.fields["instance"] == "b" and refused.fields["holder"] == "a"
    again = _register(ctx, "a")  # the holder restarted on its state directory
    assert (again.status.instance, again.status.epoch) == ("a", 2)


def test_a_new_instance_takes_over_once_the_lease_ran_out_and_fences_the_old(
    ctx: Context,
) -> None:
    _register(ctx, "a")
    assert isinstance(ctx.clock, FakeClock)
    ctx.clock.advance(LEASE_S + 1)
    taken = _register(ctx, "b")
    assert (taken.status.instance, taken.status.epoch) == ("b", 2)
    before = _stored(ctx).metadata.resource_version
    with pytest.raises(LeaseHeld, match="must stand down"):
        heartbeat(ctx, "w", [7], sender=("a", 1))
    with pytest.raises(LeaseHeld, match="registered again"):
        heartbeat(ctx, "w", [7], sender=("b", 1))
    assert _stored(ctx).metadata.resource_version == before
    worker, _ = heartbeat(ctx, "w", [], sender=("b", 2))
    assert worker.status.instance == "b"
    heartbeat(ctx, "w", [])  # an agent that names no instance is judged by its worker


def test_an_agent_that_says_no_instance_is_replaced_by_its_upgrade_at_once(ctx: Context) -> None:
    _register(ctx, None)
    assert _register(ctx, None).status.epoch == 2
    upgraded = _register(ctx, "a")  # the same host's agent, upgraded in place
    assert (upgraded.status.instance, upgraded.status.epoch) == ("a", 3)
    with pytest.raises(LeaseHeld):
        _register(ctx, None)  # an older agent is now another instance
