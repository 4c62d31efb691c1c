"""Which agent holds a worker's lease: one instance at a time, fenced by an epoch.

Two agents given the same `--name` (a copied unit file, a cloned host) must not both run
the worker's jobs. Each agent keeps an instance id in its state directory
(worker/identity.py) and says it when it registers, heartbeats and reports. The Worker
keeps the holder's instance and a fencing epoch (`status.instance`, `status.epoch`):

- a registration of the holder (an agent restarted on its state directory) is taken;
- a registration of another instance is refused (409) while the holder's lease is live,
  as the workers loop judges it (observed time); once it has run out the newcomer takes
  the lease over;
- every registration taken bumps the epoch, and a heartbeat or report that names another
  instance or an older epoch is refused (409) and changes nothing: an old instance that
  wakes up after it was replaced is fenced off.

A request that names no instance (an agent older than this) is judged by its worker alone,
and a worker held by such an agent is taken by the first agent that names one: an agent
upgraded in place registers again at once, as before.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobd.api.models import Worker, WorkerPhase
from jobd.controllers import workers
from jobd.controllers.context import Context
from jobd.store.base import Conflict, EventRecord

__all__ = ["LeaseHeld", "check_holder", "refuse_other_instance"]


class LeaseHeld(Conflict):
    """Another instance holds the worker's lease, or replaced this one: a 409."""


def _lease_expiry(ctx: Context, worker: Worker) -> datetime | None:
    """When the holder's lease runs out, in wall time; None when it has already."""
    if worker.status.phase != WorkerPhase.READY:
        return None
    age = ctx.observed.elapsed_since(workers.last_renewal(ctx, worker))
    remaining = worker.spec.lease_duration_s - age
    return ctx.clock.now() + timedelta(seconds=remaining) if remaining > 0 else None


def refuse_other_instance(ctx: Context, live: Worker | None, instance: str | None) -> None:
    """Before a registration: LeaseHeld when another instance's lease is live."""
    if live is None or live.status.instance in (None, instance):
        return  # the holder's own restart; or a holder that said no instance (an older agent)
    expiry = _lease_expiry(ctx, live)
    if expiry is None:
        return  # the holder went silent for a whole lease: the newcomer may take over
    fields = {"instance": instance, "holder": live.status.instance, "until": _rfc3339(expiry)}
    ctx.store.append_events(
        [EventRecord("worker_instance_refused", worker=live.name, fields=fields)]
    )
    raise LeaseHeld(
        f"worker {live.name} is held by another instance ({_on_host(live)}) until its lease "
        f"expires at {_rfc3339(expiry)}; stop that agent, or give this one another --name"
    )


def check_holder(worker: Worker, instance: str | None, epoch: int | None) -> None:
    """Before a heartbeat or a report: LeaseHeld unless the sender holds the lease."""
    held = worker.status
    if instance is not None and instance != held.instance:
        raise LeaseHeld(
            f"worker {worker.name} is held by another instance ({_on_host(worker)}), "
            f"which replaced this one (epoch {held.epoch}); this agent must stand down"
        )
    if epoch is not None and epoch != held.epoch:
        raise LeaseHeld(
            f"worker {worker.name} was registered again (epoch {held.epoch}, this agent's "
            f"is {epoch}); this agent must stand down"
        )


def _on_host(worker: Worker) -> str:
    instance = worker.status.instance or "unnamed"
    return f"instance {instance} on host {worker.status.hostname or 'unknown'}"


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
