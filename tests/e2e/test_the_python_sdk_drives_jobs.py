"""`Client` and `jobd.AsyncClient` against a real `jobd dev`, found as `job` finds it.

The clients read JOBD_URL and the local broker's admin token from the environment, as
`job` does; jobs come back as the api's models, output as text or followed line by
line, and a refusal as `jobd.ApiError` with the broker's status and reason.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator

import pytest

from jobd import ApiError, AsyncClient, Client
from jobd.api.models import Job, Phase
from tests.e2e.harness import Jobd


@pytest.fixture
def client(jobd: Jobd, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """A Client that finds the broker as `job` does: from JOBD_URL and the data dir."""
    for key in [k for k in os.environ if k.startswith("JOBD_")]:
        monkeypatch.delenv(key)
    for key, value in jobd.env.items():
        if key.startswith("JOBD_"):
            monkeypatch.setenv(key, value)
    with Client() as made:
        yield made


def _script(text: str) -> list[str]:
    return [sys.executable, "-c", text]


def test_submit_watch_until_succeeded_and_read_the_logs(client: Client, jobd: Jobd) -> None:
    job = client.submit(
        _script("print('hello from the sdk'); print('second line')"),
        cwd=str(jobd.root),
        labels={"suite": "sdk"},
    )
    assert isinstance(job, Job) and job.metadata.id is not None
    seen = []
    for op, changed in client.watch(selector={"suite": "sdk"}, timeout=30):
        assert changed.metadata.id == job.metadata.id
        seen.append((op, changed.status.phase))
        if changed.status.phase == Phase.SUCCEEDED:
            break
    assert seen[0][0] == "ADDED" and seen[-1] == ("MODIFIED", Phase.SUCCEEDED)
    final = client.wait(job.metadata.id, timeout=30)
    assert final.status.phase == Phase.SUCCEEDED and final.status.exit_code == 0
    assert client.logs(job) == "hello from the sdk\nsecond line\n"
    assert [j.metadata.id for j in client.list(selector="suite=sdk")] == [job.metadata.id]
    assert client.get(f"default/{job.metadata.name}").metadata.id == job.metadata.id


def test_logs_are_followed_line_by_line_until_the_job_ends(client: Client, jobd: Jobd) -> None:
    job = client.submit(
        _script("import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.3)"),
        cwd=str(jobd.root),
    )
    assert list(client.logs(job, follow=True)) == ["0\n", "1\n", "2\n"]
    assert client.get(job).status.phase == Phase.SUCCEEDED


def test_refusals_raise_with_the_brokers_status_and_reason(client: Client, jobd: Jobd) -> None:
    with pytest.raises(ApiError) as missing:
        client.get(987654)
    assert missing.value.status == 404
    with pytest.raises(ApiError) as invalid:
        client.submit(["true"], cwd=str(jobd.root), checkpoint_grace_s=301)
    assert invalid.value.status == 422 and "checkpoint_grace_s" in invalid.value.message
    done = client.wait(client.submit(["true"], cwd=str(jobd.root)), timeout=30)
    with pytest.raises(ApiError) as conflict:
        client.preempt(done)
    assert conflict.value.status == 409 and conflict.value.message
    with pytest.raises(TypeError, match="no field"):
        client.submit(["true"], gpu=1)


def test_cancel_and_a_wait_that_times_out(client: Client, jobd: Jobd) -> None:
    job = client.submit(["sleep", "30"], cwd=str(jobd.root))
    with pytest.raises(TimeoutError):
        client.wait(job, timeout=0.5)
    client.cancel(job)
    assert client.wait(job, timeout=30).status.phase == Phase.CANCELLED


def test_the_async_client_does_the_same(client: Client, jobd: Jobd) -> None:
    async def scenario() -> tuple[Job, str, list[str], list[tuple[str, Phase]]]:
        async with AsyncClient() as aclient:
            script = _script("import time; time.sleep(0.5); print('async')")
            job = await aclient.submit(script, cwd=str(jobd.root), labels={"suite": "async"})
            final = await aclient.wait(job, timeout=30)  # watched: it runs for half a second
            seen = [
                (op, j.status.phase)
                async for op, j in aclient.watch(selector={"suite": "async"}, timeout=0.5)
            ]
            followed = [line async for line in await aclient.logs(job, follow=True)]
            with pytest.raises(ApiError) as missing:
                await aclient.cancel(987654)
            assert missing.value.status == 404
            return final, await aclient.logs(job), followed, seen

    final, text, followed, seen = asyncio.run(scenario())
    assert final.status.phase == Phase.SUCCEEDED
    assert text == "async\n" and followed == ["async\n"]
    assert seen == [("ADDED", Phase.SUCCEEDED)]
