"""A create answers with the text its commit made of the job (the change feed's), which
must be the document a read of the job gives, its secret values masked."""

from __future__ import annotations

import httpx
import pytest

from jobd.api.secrets import MASK
from jobd.broker.http.responses import doc
from tests.integration.conftest import broker_state

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("env", [{}, {"API_TOKEN": "s3cret", "PLAIN": "seen"}])
async def test_a_create_answers_what_a_read_of_the_job_gives(
    api: httpx.AsyncClient, env: dict[str, str]
) -> None:
    job = {"apiVersion": "jobd/v1", "kind": "Job", "spec": {"command": ["true"], "env": env}}
    created = await api.post("/jobs", json=job)
    assert created.status_code == 201
    answer = created.json()
    job_id = answer["metadata"]["id"]
    assert answer == (await api.get(f"/jobs/{job_id}")).json()
    stored = broker_state(api).store.get_job(job_id)
    assert stored is not None and created.text == str(doc(stored))
    assert broker_state(api).feed.document(stored) == created.text  # what it was answered from
    if env:
        assert answer["spec"]["env"] == {"API_TOKEN": MASK, "PLAIN": "seen"}
        assert "s3cret" not in created.text
