"""The follower's families of `/metrics` (PostgreSQL): what it heard, and the store's reach.

`jobd_store_reachable` is 0 while the follower's LISTEN connection is lost (the database
is away, broker/streams/following.py), so an alert needs no log scraping;
`jobd_store_followed_revision` is the newest revision this broker's listeners were
handed, which a standby keeps level with `jobd_store_revision` of the leader; and
`jobd_store_followed_changes_total` counts the changes of other brokers it handed on.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobd.broker.streams.following import Follower

__all__ = ["FollowerCollector"]


class FollowerCollector(Collector):
    def __init__(self, follower: Follower) -> None:
        self.follower = follower

    def collect(self) -> Iterator[Metric]:
        follower = self.follower
        yield GaugeMetricFamily(
            "jobd_store_reachable",
            "1 while the broker's LISTEN connection to the store is open, 0 while it is lost.",
            value=0 if follower.away_since is not None else 1,
        )
        yield GaugeMetricFamily(
            "jobd_store_followed_revision",
            "The newest revision this broker's listeners (watches, caches) were handed.",
            value=follower.store.heard,
        )
        yield CounterMetricFamily(
            "jobd_store_followed_changes",
            "Changes other brokers committed, handed to this broker's listeners.",
            value=follower.followed,
        )
