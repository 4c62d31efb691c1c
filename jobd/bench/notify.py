"""`notify`: what a webhook receiver that never answers costs the broker (opt-in).

The same drain (n `true` jobs in one apply, `jobd broker` + `jobd worker`) on two fresh
brokers: one with no notification sink, one whose `--webhook` is a socket that takes
connections and never answers (every phase asked for, a 300 s timeout: a request stays
held, the queue fills and drops its oldest). The figure is the broker process's CPU per
job in each, which a noisy neighbour moves less than wall time; the target is the second
within 5% of the first (docs/performance.md, "Notifications").
"""

from __future__ import annotations

import socket
import time

from jobd.bench.calls import PROJECT, job_doc
from jobd.bench.context import BenchContext
from jobd.bench.dispatch import DRAIN_SLOTS, wait_drained
from jobd.bench.stats import Result
from jobd.wire import routes

__all__ = ["run_notify"]

TARGET_RATIO = 1.05
_EVERY_PHASE = "Running,Succeeded,Failed,Preempted,Cancelled,Lost"


async def run_notify(ctx: BenchContext) -> Result:
    ctx.require_own_broker("it compares two brokers it starts, one with a silent webhook")
    total = ctx.sized(100, 1_000, 5_000)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1024)  # the kernel takes the connections; nothing ever reads them
        hook = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
        env = {"JOBD_WEBHOOK": hook, "JOBD_WEBHOOK_EVENTS": _EVERY_PHASE}
        plain, _ = await _broker_cpu_ms_per_job(ctx, "notify-plain", total, {})
        held, queued = await _broker_cpu_ms_per_job(
            ctx, "notify-silent", total, env | {"JOBD_WEBHOOK_TIMEOUT_S": "300"}
        )
    ratio = held / plain if plain else None
    result = Result("notify", n=total)
    result.extra = {
        "broker_cpu_ms_per_job": round(plain, 3),
        "silent_webhook_broker_cpu_ms_per_job": round(held, 3),
        "ratio": round(ratio, 3) if ratio is not None else None,
        "webhook_queued": queued,
    }
    result.target = f"broker CPU per job with a silent webhook <= {TARGET_RATIO} x without"
    result.met = ratio is not None and ratio <= TARGET_RATIO
    result.notes = "a drain without, then with, a --webhook that never answers; broker CPU"
    result.details.append(f"broker CPU per job: {plain:.3f} ms, {held:.3f} ms with the webhook")
    return result


async def _broker_cpu_ms_per_job(
    ctx: BenchContext, name: str, total: int, env: dict[str, str]
) -> tuple[float, int]:
    project = f"{PROJECT}-{name}-{int(time.time())}"
    docs = [job_doc(f"{name}-{i}", project=project) for i in range(total)]
    async with ctx.broker(name, mode="split", slots=DRAIN_SLOTS, env=env) as (http, broker):
        assert broker is not None  # require_own_broker
        before = broker.cpu_seconds()["broker"]
        await http.post(routes.APPLY.url(), json={"documents": docs}, timeout=600)
        await wait_drained(ctx, http, project, total)
        used = broker.cpu_seconds()["broker"] - before
        scrape = (await http.get(routes.METRICS.url())).text
    return used / total * 1000, _queued(scrape)


def _queued(scrape: str) -> int:
    """`jobd_notify_queued` of the webhook: shows the sink was there and held up."""
    prefix = 'jobd_notify_queued{sink="webhook-0"} '
    found = [line for line in scrape.splitlines() if line.startswith(prefix)]
    return int(float(found[0].removeprefix(prefix))) if found else 0
