"""The dashboard's job page of a multi-host job (issue 25) lists its members by rank:
worker, address, phase, exit; its Worker line says how many more hosts it holds. A job of
one node's page has no Members section."""

from __future__ import annotations

import httpx
import pytest

from jobd.api.models import Member, Phase
from tests.integration.conftest import broker_state
from tests.integration.test_dashboard_sessions_are_one_time_and_scoped import (  # noqa: F401
    _job,
    _page,
    _sign_in,
    api,
)

pytestmark = pytest.mark.anyio


async def test_a_gangs_page_lists_its_members(api: httpx.AsyncClient) -> None:  # noqa: F811
    job_id = await _job(api, "gang", nodes=2)
    single = await _job(api, "single")
    store = broker_state(api).store
    bound = store.get_job(job_id).evolve()
    bound.status.phase, bound.status.worker = Phase.RUNNING, "gpu1"
    bound.status.members = [
        Member(rank=0, worker="gpu1", address="10.0.0.1", phase=Phase.RUNNING, gpus=[0]),
        Member(rank=1, worker="gpu2", address="10.0.0.2", phase=Phase.FAILED, exit_code=3),
    ]
    store.update_job(bound)
    cookie = await _sign_in(api)
    text = (await _page(api, f"/ui/jobs/{job_id}", cookie)).text
    assert "<h2>Members</h2>" in text and "gpu1 +1" in text
    row = text.split('<tr id="member-1">')[1].split("</tr>")[0]
    assert "gpu2" in row and "10.0.0.2" in row and "Failed" in row and "<td>3" in row
    assert "<h2>Members</h2>" not in (await _page(api, f"/ui/jobs/{single}", cookie)).text
