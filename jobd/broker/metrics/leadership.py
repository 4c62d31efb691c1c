"""`jobd_leader` and `jobd_leader_epoch`: whether this broker leads, and at which epoch.

Read at scrape time from broker/leadership.py. A broker on SQLite always leads, at
epoch 0; on PostgreSQL exactly one broker of a store should say 1 at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobd.broker.leadership import Leadership

__all__ = ["LeaderCollector"]


class LeaderCollector(Collector):
    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def collect(self) -> Iterator[Metric]:
        leading = self.leadership.is_leader
        yield GaugeMetricFamily(
            "jobd_leader", "1 while this broker leads (runs the loops, takes writes), else 0.",
            value=1 if leading else 0,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "jobd_leader_epoch",
            "The epoch this broker leads at (0 on SQLite, or before it was ever elected).",
            value=self.leadership.epoch,
        )
