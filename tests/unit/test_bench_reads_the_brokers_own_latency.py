"""The bench reads the broker's own latency histogram of a route from /metrics text.

Two readings of the cumulative buckets, before and after a run: the percentiles are of
the requests between them, interpolated within a bucket as Prometheus'
histogram_quantile does.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from jobd.bench.served import Buckets, bucket_percentile, buckets_of

ROUTE = "/workers/{name}/heartbeat"


def _reading(registry: CollectorRegistry) -> Buckets:
    return buckets_of(generate_latest(registry).decode(), "POST", ROUTE)


def test_percentiles_are_of_the_requests_between_two_readings() -> None:
    registry = CollectorRegistry()
    seconds = Histogram(
        "jobd_http_request_duration_seconds",
        "",
        ["method", "route"],
        buckets=(0.001, 0.01, 0.1),
        registry=registry,
    )
    heartbeat = seconds.labels("POST", ROUTE)
    seconds.labels("GET", "/healthz").observe(5.0)  # another route: not counted
    for _ in range(50):
        heartbeat.observe(0.05)  # before the run: not counted
    before = _reading(registry)
    for _ in range(99):
        heartbeat.observe(0.0005)
    heartbeat.observe(0.05)
    after = _reading(registry)
    assert bucket_percentile(before, after, 50) == pytest.approx(0.001 * 50 / 99)
    # The 100th request is the one in (0.01, 0.1]: the p99.5 falls half way into it.
    assert bucket_percentile(before, after, 99.5) == pytest.approx(0.01 + 0.09 * 0.5)


def test_no_requests_between_the_readings_is_no_figure() -> None:
    same = {0.001: 3.0, float("inf"): 3.0}
    assert bucket_percentile(same, same, 99) is None
    assert bucket_percentile({}, {}, 99) is None


def test_a_percentile_in_the_open_last_bucket_is_its_lower_bound() -> None:
    after = {0.001: 1.0, 0.1: 1.0, float("inf"): 10.0}
    assert bucket_percentile({}, after, 99) == 0.1
