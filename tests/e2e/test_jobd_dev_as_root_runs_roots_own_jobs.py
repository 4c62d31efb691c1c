"""`jobd dev` started by root serves root (issue 24 item 2): root's own job, submitted over
its Unix socket (owner `root`, from the kernel), is admitted without `allow_root` and runs
as root, as a job of no owner does. A broker that is not `jobd dev`'s refuses it unless
the project allows root (in-process: test_a_job_goes_only_where_its_owner_exists.py).

Needs root: skipped otherwise, failed under CI=true.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobd.cli.job_main import cli
from tests.e2e.harness import Jobd, start_jobd, stop_jobd


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs this test as root: it is about jobd dev started by root")
        pytest.skip("needs root: it is about jobd dev started by root")
    where = Path(tempfile.mkdtemp(prefix="jobd-dev-root-"))
    socket = where / "jobd.sock"
    running = start_jobd(tmp_path_factory.mktemp("dev"), "--slots", "2", "--socket", str(socket))
    running.extra["socket"] = socket
    yield running
    stop_jobd(running)
    shutil.rmtree(where, ignore_errors=True)


def test_roots_own_job_over_the_socket_is_admitted_and_runs_as_root(jobd: Jobd) -> None:
    env = {
        "JOBD_SOCKET": str(jobd.extra["socket"]),
        "JOBD_URL": "",
        "JOBD_TOKEN": "",
        "JOBD_CONFIG": "/nonexistent/jobd/config.yaml",
    }
    said = CliRunner().invoke(
        cli, ["submit", "--cwd", "/", "--", "sh", "-c", "id -u"], env=env, prog_name="job"
    )
    assert said.exit_code == 0, said.output
    job_id = int(said.output.strip().splitlines()[-1])
    done = jobd.wait_phase(job_id, "Succeeded", "Failed")
    assert done["metadata"]["owner"] == "root"
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert jobd.ok("logs", str(job_id)).strip() == "0"
