"""A job of an owner is placed only on a worker whose host knows that user, and a job of
root only in a project that allows it (issue 24 item 2).

The scheduler, placement and the preemption plan on a real SQLite store and a fake
clock: workers publish the users their host knows (`status.users`, at registration and
in a heartbeat when it changes); a job goes where its owner exists, waits Unschedulable
saying "user carol does not exist on this host" where no worker knows it, and is placed
once a heartbeat says the user was added. Through the broker's ASGI app: a job of root
is refused (422 naming metadata.owner and allow_root) unless its project sets
`allow_root: true`, or `jobd dev` serves root itself; a worker publishing a hostile user
name is refused (422).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.broker.state import BrokerConfig
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.placement import UNSCHEDULABLE, PlacementController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import preempt_blockers
from jobd.controllers.verbs.resume import resume_job
from jobd.controllers.verbs.worker_lease import heartbeat, register_worker
from tests.integration.conftest import broker_client, job_document, reread

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-anything-0123"


def _submit(ctx: Context, name: str, owner: str | None, priority: int = 1) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p", owner=owner),
        spec=JobSpec(command=["true"], priority=priority, preemptible=True),
    )
    return create_jobs(ctx.store, [job], ctx.clock, workers=ctx.store.list_workers())[0]


async def _schedule(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")


def _unschedulable(job: Job) -> str | None:
    for c in job.status.conditions:
        if c.type == "Scheduled" and c.reason == UNSCHEDULABLE:
            return c.message
    return None


async def test_each_job_goes_where_its_owner_exists(ctx: Context) -> None:
    register_worker(ctx, "wa", WorkerSpec(slots=4), "a", "procgroup", owners=("owner", ["alice"]))
    register_worker(ctx, "wb", WorkerSpec(slots=4), "b", "procgroup", owners=("owner", ["bob"]))
    bobs = _submit(ctx, "bobs", "bob")
    alices = _submit(ctx, "alices", "alice")
    nobodys = [_submit(ctx, f"anyone-{i}", None) for i in range(4)]
    await _schedule(ctx)
    assert reread(ctx, bobs).status.worker == "wb"
    assert reread(ctx, alices).status.worker == "wa"
    assert {reread(ctx, j).status.worker for j in nobodys} == {"wa", "wb"}  # anywhere


async def test_an_owner_no_host_knows_waits_saying_so_until_one_does(ctx: Context) -> None:
    register_worker(ctx, "wa", WorkerSpec(slots=2), "a", "procgroup", owners=("owner", ["alice"]))
    carols = _submit(ctx, "carols", "carol")
    assert _unschedulable(carols) == (
        "no worker may run it (wa: user carol does not exist on this host)"
    )
    await _schedule(ctx)
    assert reread(ctx, carols).status.phase == Phase.PENDING

    # The host's users change (useradd carol): the next heartbeat says so.
    worker, _ = heartbeat(ctx, "wa", [], users=["alice", "carol"])
    assert worker.status.users == ["alice", "carol"]
    assert ctx.store.get_worker("wa").status.users == ["alice", "carol"]  # type: ignore[union-attr]
    await PlacementController(ctx).reconcile(str(carols.id))
    assert _unschedulable(reread(ctx, carols)) is None
    await _schedule(ctx)
    assert reread(ctx, carols).status.worker == "wa"


async def test_a_worker_publishing_no_users_takes_any_owner(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "h", "procgroup", owners=("jobd", None))
    carols = _submit(ctx, "carols", "carol")
    assert _unschedulable(carols) is None
    await _schedule(ctx)
    assert reread(ctx, carols).status.worker == "w"


async def test_no_job_is_preempted_where_the_waiting_owner_does_not_exist(ctx: Context) -> None:
    register_worker(ctx, "wa", WorkerSpec(slots=1), "a", "procgroup", owners=("owner", ["alice"]))
    low = _submit(ctx, "low", "alice")
    await _schedule(ctx)
    running = reports.report_started(ctx, reread(ctx, low), "wa")
    urgent = _submit(ctx, "urgent", "bob", priority=50)
    with pytest.raises(TransitionError):  # freeing wa would not let bob's job run there
        preempt_blockers(ctx, urgent, dry_run=True)
    alices = _submit(ctx, "alices-urgent", "alice", priority=50)
    plan = preempt_blockers(ctx, alices, dry_run=True)  # the same room does for alice
    assert [v.id for v in plan.victims] == [running.id]


async def test_a_resumed_job_is_still_its_owners(ctx: Context) -> None:
    preempted = _submit(ctx, "alices", "alice").evolve()
    preempted.status.phase = preempted.status.desired_phase = Phase.PREEMPTED
    ctx.store.update_job(preempted)
    resumed = resume_job(ctx, reread(ctx, preempted), from_scratch=True)
    assert resumed.metadata.owner == "alice"  # never the worker's user (root) by default
    assert reread(ctx, resumed).metadata.owner == "alice"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        yield c


def _of(owner: str, name: str = "j", project: str = "default") -> dict[str, object]:
    doc = job_document(name)
    doc["metadata"] = {"name": name, "project": project, "owner": owner}
    return doc


async def test_a_job_of_root_needs_its_project_to_allow_root(api: httpx.AsyncClient) -> None:
    refused = await api.post("/jobs", json=_of("root", project="lab"))
    assert refused.status_code == 422, refused.text
    assert "metadata.owner" in refused.text and "allow_root" in refused.text
    assert (await api.get("/jobs")).json()["items"] == []  # nothing was made
    applied = await api.post(
        "/apply",
        json={
            "documents": [
                {"kind": "Project", "metadata": {"name": "lab"}, "spec": {"allow_root": True}},
                _of("root", "in-apply", "lab"),
            ]
        },
    )
    assert applied.status_code == 200, applied.text
    made = await api.post("/jobs", json=_of("root", project="lab"))
    assert made.status_code == 201, made.text
    assert made.json()["metadata"]["owner"] == "root"
    still = await api.post("/jobs", json=_of("root", project="elsewhere"))
    assert still.status_code == 422, still.text
    array = {
        "kind": "JobArray",
        "metadata": {"name": "sweep", "project": "elsewhere", "owner": "root"},
        "spec": {"command": ["true"], "array": {"indices": [0, 1]}},
    }
    refused_array = await api.post("/arrays", json=array)
    assert refused_array.status_code == 422, refused_array.text
    assert "allow_root" in refused_array.text
    array["metadata"]["project"] = "lab"  # type: ignore[index]
    assert (await api.post("/arrays", json=array)).status_code == 201


async def test_jobd_dev_admits_its_own_users_jobs_as_root(tmp_path: Path) -> None:
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN, trusted_owner="root"
    )
    async with broker_client(config) as api:
        made = await api.post("/jobs", json=_of("root"))
        assert made.status_code == 201, made.text


async def test_a_worker_publishing_a_hostile_user_name_is_refused(api: httpx.AsyncClient) -> None:
    for hostile in ("../root", "al\x00ice", "a" * 40, "-rf"):
        answer = await api.put(
            "/workers/w1",
            json={"spec": {"slots": 1}, "runs_as": "owner", "users": ["alice", hostile]},
        )
        assert answer.status_code == 422, (hostile, answer.text)
        assert "users" in answer.text
    for runs_as in ("own\x1ber", "a b", ""):
        answer = await api.put("/workers/w1", json={"spec": {"slots": 1}, "runs_as": runs_as})
        assert answer.status_code == 422, (runs_as, answer.text)
    beat = await api.post("/workers/w1/heartbeat", json={"running": [], "users": ["../root"]})
    assert beat.status_code == 422, beat.text
    fine = await api.put(
        "/workers/w1", json={"spec": {"slots": 1}, "runs_as": "owner", "users": ["alice"]}
    )
    assert fine.status_code == 200, fine.text
    status = fine.json()["worker"]["status"]
    assert (status["runs_as"], status["users"]) == ("owner", ["alice"])
