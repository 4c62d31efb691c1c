"""Who a latency belongs to: the broker's own timing of a route, and the bench's loop lag.

A latency the bench measures is the broker's handling plus whatever held either event
loop meanwhile. Two figures tell them apart. The broker times every request in its
outermost middleware (`jobd_http_request_duration_seconds`, by route template, read
from `GET /metrics` before and after a run); the difference of the two histograms is
what the broker spent on the requests of the run, percentiles interpolated within a
bucket. `LoopLag` sleeps a few milliseconds over and over in the bench's own loop and
keeps how late each wake-up was: when the bench's loop is late, so is every reply it
times, whatever the broker did. `HealthProbe` asks `GET /healthz` (which does no work)
every few milliseconds on a connection of its own: its latency less the bench's lag is
how long the broker's loop took to get to a request at all.
"""

from __future__ import annotations

import time

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

from jobd.bench.stats import percentile
from jobd.bench.wire import Connection
from jobd.wire import routes
from jobd.wire.calls import Call

__all__ = ["Buckets", "HealthProbe", "LoopLag", "bucket_percentile", "buckets_of", "route_buckets"]

_DURATION = "jobd_http_request_duration_seconds"

# Upper bound (seconds) -> how many requests took at most that long (cumulative).
Buckets = dict[float, float]


async def route_buckets(http: httpx.AsyncClient, method: str, route: str) -> Buckets:
    """The broker's latency histogram of one route template, as `GET /metrics` says now."""
    return buckets_of((await http.get(routes.METRICS.url())).text, method, route)


def buckets_of(text: str, method: str, route: str) -> Buckets:
    """One route's latency buckets in Prometheus text exposition."""
    buckets: Buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name != _DURATION:
            continue
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_bucket")
                and labels.get("method") == method
                and labels.get("route") == route
            ):
                buckets[float(labels["le"])] = sample.value
    return buckets


def bucket_percentile(before: Buckets, after: Buckets, q: float) -> float | None:
    """The q-th percentile (seconds) of the requests between two readings of a histogram.

    Linear within the bucket it falls in, as Prometheus' histogram_quantile; None
    without requests, the lower bound of the open last bucket when it falls there.
    """
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = counts[-1] * q / 100
    low_bound, low_count = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return low_bound
            share = (rank - low_count) / (count - low_count) if count > low_count else 1.0
            return low_bound + (bound - low_bound) * share
        low_bound, low_count = bound, count
    return low_bound


class LoopLag:
    """How late this process's event loop wakes a task that sleeps `every_s`, over and over."""

    def __init__(self, every_s: float = 0.005) -> None:
        self.every_s = every_s
        self.late: list[float] = []

    async def run(self) -> None:
        while True:
            began = time.perf_counter()
            await anyio.sleep(self.every_s)
            self.late.append(max(0.0, time.perf_counter() - began - self.every_s))

    def p(self, q: float) -> float | None:
        return percentile(self.late, q)


class HealthProbe:
    """`GET /healthz` every `every_s` over `conn`, one at a time; each answer's seconds."""

    def __init__(self, conn: Connection, every_s: float = 0.01) -> None:
        self.conn = conn
        self.every_s = every_s
        self.took: list[float] = []
        self._call = Call(routes.HEALTHZ, routes.HEALTHZ.url(), lambda r: r.status_code)

    async def run(self) -> None:
        while True:
            began = time.perf_counter()
            await self.conn.run(self._call)
            self.took.append(time.perf_counter() - began)
            await anyio.sleep(self.every_s)

    def p(self, q: float) -> float | None:
        return percentile(self.took, q)
