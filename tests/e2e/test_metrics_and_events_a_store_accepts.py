"""What monitoring reads, from a real `jobd dev` that has run, failed, preempted, killed
and cancelled jobs: `/metrics` through promtool's lint and prometheus-client's
OpenMetrics parser (both enforce the naming rules), the Grafana dashboard's queries
against that scrape, and events.jsonl held to docs/events.md (one type per field, lines
in commit order with the worker's time in `observed_at`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.e2e.harness import REPO, Jobd, start_jobd, stop_jobd, write_script
from tests.events_doc import events_doc

SENTINEL_ON_TERM = """\
import os, signal, time
def on_term(signum, frame):
    os.write(1, b"jobd-checkpoint-complete\\n")
    time.sleep(0.2)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(600)
"""
SLEEPS = """\
import time
print("ready", flush=True)
time.sleep(600)
"""
IGNORES_TERM = """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
JOBS_RUN = 5


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    """A `jobd dev` after: a success, a failure, a preemption with a checkpoint, one killed
    at the end of its grace, a cancel, and a cordon and uncordon of its worker."""
    jobd = start_jobd(tmp_path_factory.mktemp("metrics"), "--slots", "2")
    try:
        jobd.ok("submit", "--wait", "--", sys.executable, "-c", "pass")
        jobd.job("submit", "--wait", "--", sys.executable, "-c", "raise SystemExit(3)")
        for name, body, grace in (("ckpt", SENTINEL_ON_TERM, "10"), ("stub", IGNORES_TERM, "1")):
            job = _running(jobd, name, body, "--preemptible", "--checkpoint-grace", grace)
            jobd.ok("preempt", str(job))
            jobd.wait_phase(job, "Preempted", timeout=15)
        job = _running(jobd, "cancelled", SLEEPS)
        jobd.ok("cancel", str(job))
        jobd.wait_phase(job, "Cancelled")
        jobd.ok("cordon", "w1")
        jobd.ok("uncordon", "w1")
        _wait_for_exits(jobd, JOBS_RUN)
        yield jobd
    finally:
        stop_jobd(jobd)


def _running(jobd: Jobd, name: str, body: str, *flags: str) -> int:
    command = write_script(jobd.root, f"{name}.py", body)
    job = int(jobd.ok("submit", "--name", name, *flags, "--", *command).strip())
    jobd.wait_phase(job, "Running")
    deadline = time.monotonic() + 10
    while "ready" not in jobd.ok("logs", str(job)):
        assert time.monotonic() < deadline, f"{name} never said ready"
        time.sleep(0.05)
    return job


def _wait_for_exits(jobd: Jobd, count: int) -> None:
    """The worker ships its events in batches: wait for every job's process_exited."""
    deadline = time.monotonic() + 10
    while len(jobd.events(event="process_exited")) < count:
        assert time.monotonic() < deadline, "the worker's process_exited events never came"
        time.sleep(0.05)


def _scrape(jobd: Jobd, accept: str | None = None) -> httpx.Response:
    headers = {"Accept": accept} if accept else {}
    response = httpx.get(f"{jobd.url}/metrics", headers=headers, timeout=5)
    assert response.status_code == 200
    return response


def _families(jobd: Jobd) -> dict[str, Metric]:
    response = _scrape(jobd, OPENMETRICS)
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def _value(family: Metric, suffix: str = "", **labels: str) -> float:
    found = [
        s.value
        for s in family.samples
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (family.name, suffix, labels, family.samples)
    return float(found[0])


# -- /metrics -----------------------------------------------------------------------------


def test_the_scrape_parses_as_openmetrics_and_counts_what_ran(ran: Jobd) -> None:
    families = _families(ran)
    assert _value(families["jobd_jobs_created"], "_total") == JOBS_RUN
    finished = families["jobd_jobs_finished"]
    for phase, n in (("Succeeded", 1), ("Failed", 1), ("Preempted", 2), ("Cancelled", 1)):
        assert _value(finished, "_total", phase=phase) == n
    assert _value(families["jobd_preemptions"], "_total", reason="manual") == 2
    assert _value(families["jobd_checkpoints_complete"], "_total") == 1
    assert _value(families["jobd_workers_lost"], "_total") == 0
    assert _value(families["jobd_jobs"], phase="Succeeded") == 1
    assert _value(families["jobd_workers"], status="Ready") == 1
    assert _value(families["jobd_worker_slots"], worker="w1") == 2
    assert _value(families["jobd_worker_slots_used"], worker="w1") == 0
    assert families["jobd_build"].type == "info"


def test_latency_histograms_time_starts_preemptions_and_graces(ran: Jobd) -> None:
    families = _families(ran)
    assert _value(families["jobd_job_start_latency_seconds"], "_count") == JOBS_RUN
    assert _value(families["jobd_job_queue_wait_seconds"], "_count") == JOBS_RUN
    assert _value(families["jobd_preemption_signal_latency_seconds"], "_count") == 2
    grace = families["jobd_grace_used_seconds"]
    assert _value(grace, "_count") == 3  # two preemptions and a cancel
    # The job that ignored SIGTERM used its whole grace of 1 s; the others far less.
    assert 1.0 <= _value(grace, "_sum") < 3.0


def test_request_latency_is_labelled_by_route_template_fast_path_too(ran: Jobd) -> None:
    heartbeat = ("POST", "/workers/{name}/heartbeat")
    deadline = time.monotonic() + 20  # heartbeats come every lease/3; the run may be shorter
    while True:
        family = _families(ran)["jobd_http_request_duration_seconds"]
        routes = {(s.labels["method"], s.labels["route"]) for s in family.samples}
        if heartbeat in routes or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ("POST", "/jobs/{job_id}/preempt") in routes  # FastAPI's routing
    assert ("POST", "/jobs") in routes  # the fast path
    assert heartbeat in routes  # the fast path, templated
    assert not any(re.search(r"/\d", route) for _, route in routes), routes


def test_promtool_check_metrics_is_clean(ran: Jobd) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        reason = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    text = _scrape(ran).text
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_grafana_dashboard_queries_metrics_the_broker_exports(ran: Jobd) -> None:
    dashboard = json.loads((REPO / "manifests" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    assert exprs
    families = _families(ran).values()
    # A family declared without samples counts (this broker has no GPU: no jobd_gpu_* yet).
    scraped = {s.name for f in families for s in f.samples} | {f.name for f in families}
    scraped |= {f"{f.name}_info" for f in families if f.type == "info"}
    named = {n for e in exprs for n in re.findall(r"\bjobd_[a-z_]+", e)}
    assert named and named <= scraped, sorted(named - scraped)


# -- events.jsonl -------------------------------------------------------------------------


def test_events_are_in_commit_order_with_the_workers_time_kept_apart(ran: Jobd) -> None:
    lines = ran.events()
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    times = [e["ts"] for e in lines]
    assert times == sorted(times), "ts is the commit's time: it never steps back"
    worker_events = [e for e in lines if e["event"] in events_doc().worker]
    assert worker_events and all(e["observed_at"].endswith("Z") for e in worker_events)


def test_every_event_and_field_is_as_docs_events_md_says(ran: Jobd) -> None:
    doc = events_doc()
    lines = ran.events()
    assert [p for line in lines for p in doc.problems(line)] == []
    seen = {line["event"] for line in lines}
    must = {"process_exited", "signal_sent", "checkpoint_sentinel_seen", "checkpoint_complete"}
    assert must | {"job_cancelled", "worker_cordoned", "worker_registered"} <= seen


def test_docs_events_md_gives_every_field_of_every_event_a_type() -> None:
    doc = events_doc()
    assert len(doc.broker) >= 18 and len(doc.worker) >= 8
    used = {f for fields in doc.events.values() for f in fields}
    assert used == set(doc.types), (sorted(used - set(doc.types)), sorted(set(doc.types) - used))
