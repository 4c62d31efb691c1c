"""`jobd.Executor` against a real `jobd dev`: functions shipped by cloudpickle, run as
jobs under this interpreter, their values and exceptions brought back.

Both ways a call travels are run: through the broker (inside the job's document, the
outcome at the end of its output) and through a shared folder. A preempted job that
checkpointed is resumed by `auto_resume`, and its future still resolves.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from jobd import ApiError, Client, Executor, JobFailed
from jobd.api.models import Phase
from tests.e2e.harness import Jobd, start_jobd, stop_jobd

# This module's functions travel by value, as a notebook's do: the job need not import it.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    running = start_jobd(tmp_path_factory.mktemp("jobd"), "--slots", "4")
    yield running
    stop_jobd(running)


@pytest.fixture
def client(jobd: Jobd, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.delenv("JOBD_EXECUTOR_DIR", raising=False)  # through the broker unless told
    token = (jobd.root / "data" / "admin.token").read_text().strip()
    with Client(jobd.url, token=token) as made:
        yield made


@pytest.fixture(params=["broker", "folder"])
def executor(request: pytest.FixtureRequest, client: Client, tmp_path: Path) -> Executor:
    folder = tmp_path / "shared" if request.param == "folder" else None
    return Executor(cwd=str(tmp_path), folder=folder, client=client)


def norm_of_range(n: int, *, scale: float = 1.0) -> float:
    import numpy as np

    return float(np.linalg.norm(np.arange(n, dtype=float)) * scale)


def refuse(value: int) -> None:
    raise ValueError(f"no good: {value}")


def square(x: int) -> dict[str, int]:
    return {"x": x, "square": x * x, "index": int(os.environ["JOBD_ARRAY_INDEX"])}


def test_the_value_of_a_function_using_numpy_comes_back(executor: Executor) -> None:
    future = executor.submit(norm_of_range, 5, scale=2.0)
    assert future.result(timeout=60) == pytest.approx(2 * (0 + 1 + 4 + 9 + 16) ** 0.5)
    assert future.done() and future.job().status.phase == Phase.SUCCEEDED


def test_a_remote_value_error_is_raised_with_its_traceback(executor: Executor) -> None:
    future = executor.submit(refuse, 7)
    with pytest.raises(ValueError, match="no good: 7") as raised:
        future.result(timeout=60)
    remote = raised.value.__cause__
    assert remote is not None and "in refuse" in str(remote)
    assert "ValueError: no good: 7" in str(remote) and "runner.py" not in str(remote)
    printed = "".join(traceback.format_exception(raised.value))
    assert "in refuse" in printed  # the remote traceback is printed with the exception
    assert future.job().status.phase == Phase.FAILED
    assert isinstance(future.exception(), ValueError)


def test_map_array_runs_one_array_of_twenty(executor: Executor, client: Client) -> None:
    futures = executor.map_array(square, range(20))
    assert len(futures) == 20
    results = [f.result(timeout=120) for f in futures]
    assert results == [{"x": i, "square": i * i, "index": i} for i in range(20)]
    arrays = {client.get(f.job_id).metadata.array.name for f in futures}  # type: ignore[union-attr]
    assert len(arrays) == 1


def test_a_call_over_the_brokers_cap_is_refused_413_with_what_to_do(client: Client) -> None:
    executor = Executor(client=client)
    with pytest.raises(ApiError) as refused:
        executor.submit(len, os.urandom(2 * 1024 * 1024))
    assert refused.value.status == 413 and "JOBD_EXECUTOR_DIR" in refused.value.message


def train(steps: int) -> dict[str, Any]:
    """Counts to `steps`, one a tenth of a second, saving its place on SIGTERM; a resumed
    run starts where RESUME_FROM says."""
    from jobd.client import install_preemption_handler

    ckpt = Path(os.environ["JOBD_CHECKPOINT_DIR"]) / "latest.json"
    resumed_from = os.environ.get("RESUME_FROM")
    state = {"step": 0, "runs": 1}
    if resumed_from:
        saved = json.loads(Path(resumed_from).read_text())
        state = {"step": saved["step"], "runs": saved["runs"] + 1}
    install_preemption_handler(lambda _left: ckpt.write_text(json.dumps(state)))
    print("training", flush=True)
    while state["step"] < steps:
        time.sleep(0.1)
        state = {**state, "step": state["step"] + 1}
    return {**state, "resumed_from": resumed_from is not None}


def test_a_preempted_job_resumes_and_its_future_resolves(client: Client) -> None:
    executor = Executor(
        client=client,
        preemptible=True,
        auto_resume=True,
        checkpoint_grace_s=20,
    )
    future = executor.submit(train, 40)
    first = future.job_id
    for line in client.logs(first, follow=True):
        if line.startswith("training"):
            break
    client.preempt(first)
    outcome = future.result(timeout=90)
    assert outcome["runs"] == 2 and outcome["resumed_from"] and outcome["step"] == 40
    assert future.job_id != first
    assert client.get(first).status.phase == Phase.PREEMPTED
    assert client.get(first).status.resumed_by == future.job_id


def test_a_cancelled_call_raises_job_failed(client: Client) -> None:
    future = Executor(client=client).submit(time.sleep, 60)
    assert future.cancel()
    with pytest.raises(JobFailed, match="Cancelled") as failed:
        future.result(timeout=60)
    assert failed.value.job.status.phase == Phase.CANCELLED
    assert future.done() and not future.cancel()
