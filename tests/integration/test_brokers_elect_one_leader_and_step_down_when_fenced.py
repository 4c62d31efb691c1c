"""`Leadership` on a real PostgreSQL store: one of two brokers leads, the other knows
where; a leader fenced out by a newer epoch steps down at its next write; a leader that
resigns hands over at once; and the elected broker's start runs with its loops' stop."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from jobd.api.models import ObjectMeta, Project
from jobd.broker.leadership import Leadership, LeaderTimings
from jobd.store.base import NotLeader
from jobd.store.sql import SQLStore, open_store

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

FAST = LeaderTimings(lease_s=3.0, renew_deadline_s=2.0, retry_period_s=0.1)


class Broker:
    """A store and its Leadership, as one broker process holds them; what it heard."""

    def __init__(self, url: str, name: str) -> None:
        self.store: SQLStore = open_store(url)
        self.leadership = Leadership.on_postgresql(self.store, url, f"http://{name}", FAST)
        self.gained: list[int] = []
        self.lost = 0

        async def gained(epoch: int) -> None:
            self.gained.append(epoch)

        def lost() -> None:
            self.lost += 1

        self.leadership.on_gained(gained)
        self.leadership.on_lost(lost)


async def _until(holds: object, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not holds():  # type: ignore[operator]
            await anyio.sleep(0.02)


@pytest.fixture
async def brokers(postgres_url: str) -> AsyncIterator[tuple[Broker, Broker]]:
    a = Broker(postgres_url, "a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.leadership.run)
        await _until(lambda: a.leadership.is_leader)
        b = Broker(postgres_url, "b")
        tg.start_soon(b.leadership.run)
        try:
            yield a, b
        finally:
            tg.cancel_scope.cancel()
            for broker in (a, b):
                broker.leadership.resign()
                broker.store.close()


async def test_one_leads_and_the_other_knows_where(brokers: tuple[Broker, Broker]) -> None:
    a, b = brokers
    await _until(lambda: b.leadership.leader_url == "http://a")
    assert a.leadership.is_leader and not b.leadership.is_leader
    assert a.gained == [1] and b.gained == []
    a.store.put_project(Project(metadata=ObjectMeta(name="by-a")))
    with pytest.raises(NotLeader):  # a standby's store takes no write
        b.store.put_project(Project(metadata=ObjectMeta(name="by-b")))


async def test_a_leader_fenced_out_steps_down_at_its_next_write(
    brokers: tuple[Broker, Broker],
) -> None:
    a, b = brokers
    with a.store.engine.begin() as conn:  # the row as a broker elected elsewhere leaves it
        conn.exec_driver_sql(
            "UPDATE leader_lease SET epoch = epoch + 1, holder = 'elsewhere', lease_s = 60"
        )
    with pytest.raises(NotLeader):
        a.store.put_project(Project(metadata=ObjectMeta(name="late")))
    await _until(lambda: not a.leadership.is_leader)
    assert a.lost == 1
    assert a.store.get_project("late") is None
    assert b.gained == []


async def test_a_resigning_leader_hands_over_at_once(brokers: tuple[Broker, Broker]) -> None:
    a, b = brokers
    await _until(lambda: b.leadership.leader_url == "http://a")
    a.leadership.resign()
    await _until(lambda: b.leadership.is_leader, timeout=FAST.lease_s / 2)  # no lease's wait
    await _until(lambda: b.gained == [2])  # the start runs beside the renewals
    b.store.put_project(Project(metadata=ObjectMeta(name="by-b")))
