"""The `jobd_fairshare_*` families of `/metrics`: fair share's standings at scrape time.

Read from the usage the broker holds and the jobs bound now (controllers/fairshare.py),
as `job usage` shows them: per project its decayed usage in billed resource-seconds,
its share of the shares, and its factor; per user within a project the usage.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobd.controllers.context import Context
from jobd.controllers.fairshare import standings

__all__ = ["FairShareCollector"]


class FairShareCollector(Collector):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        view = ctx.view
        found = standings(
            ctx.usage, view.bound.values(), view.projects, ctx.settings.billing, ctx.clock.now()
        )
        usage = GaugeMetricFamily(
            "jobd_fairshare_usage",
            "Decayed usage of each project, in billed resource-seconds (a GPU-second bills 1).",
            labels=["project"],
        )
        share = GaugeMetricFamily(
            "jobd_fairshare_share", "Each project's shares over all shares.", labels=["project"]
        )
        factor = GaugeMetricFamily(
            "jobd_fairshare_factor",
            "Each project's fair-share factor, 2^(-usage share / share): 1 unused, 0.5 on target.",
            labels=["project"],
        )
        for row in found["projects"]:
            usage.add_metric([row["project"]], row["usage"])
            share.add_metric([row["project"]], row["share"])
            factor.add_metric([row["project"]], row["factor"])
        users = GaugeMetricFamily(
            "jobd_fairshare_user_usage",
            "Decayed usage of each user within a project, in billed resource-seconds.",
            labels=["project", "user"],
        )
        for row in found["users"]:
            users.add_metric([row["project"], row["user"]], row["usage"])
        yield from (usage, share, factor, users)
