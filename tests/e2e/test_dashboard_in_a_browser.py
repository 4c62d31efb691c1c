"""The web dashboard in a real browser: headless Chromium, driven by Playwright, against a
real `jobd dev` and the real `job` command.

Signs in through the URL `job ui --no-open` prints, then: the job list shows a submitted
job and follows its phase live; a job's page shows its output arriving without a reload;
the preemption timeline shows a `job preempt`, its checkpoint and the `job resume` that
followed. Screenshots of each page go to test-artifacts/ at the repository's root.

Where Chromium (or the playwright package) is missing these skip, saying why; under
CI=true they fail instead, as the PostgreSQL tests do (`.ci/run` installs Debian's
chromium; never `playwright install`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.conftest import _in_ci
from tests.e2e.harness import BIN, REPO, Jobd, write_script

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path(os.environ.get("JOBD_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = REPO / "test-artifacts"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TALKER = """\
import time
from jobd.client import report_progress
for i in range(1, 31):
    print(f"line {i}", flush=True)
    report_progress(i, total=30, loss=1 / i)
    time.sleep(0.2)
"""
CHECKPOINTER = """\
import os, time
from pathlib import Path
from jobd.client import install_preemption_handler
def checkpoint(remaining):
    Path(os.environ["JOBD_CHECKPOINT_DIR"], "latest.txt").write_text("step 1")
install_preemption_handler(checkpoint)
print("ready", flush=True)
time.sleep(600)
"""


def _missing() -> str | None:
    """Why no browser test can run here; None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set JOBD_TEST_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    problem = _missing()
    if problem is not None:
        if _in_ci():
            pytest.fail(f"CI=true and {problem}", pytrace=False)
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, jobd: Jobd) -> Iterator[Page]:
    """A fresh browser context, signed in through `job ui`'s URL."""
    url = jobd.ok("ui", "--no-open").strip()
    assert url.startswith(f"{jobd.url}/ui/login?code=")
    context = browser.new_context()
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    opened.goto(url)
    assert opened.url == f"{jobd.url}/ui"
    yield opened
    context.close()


def _wait_for_output(jobd: Jobd, job_id: str, text: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in jobd.ok("logs", job_id):
        assert time.monotonic() < deadline, f"job {job_id} never printed {text!r}"
        time.sleep(0.05)


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def test_job_ui_prints_a_url_that_works_once_and_opens_nothing_headless(jobd: Jobd) -> None:
    env = {k: v for k, v in jobd.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = subprocess.run(
        [str(BIN / "job"), "ui"], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    url = result.stdout.strip()
    assert "works once" in result.stderr  # no browser here: it says what to do instead
    assert httpx.get(url).status_code == 303
    assert httpx.get(url).status_code == 400


def test_the_job_list_shows_a_submitted_job_and_follows_it(page: Page, jobd: Jobd) -> None:
    from playwright.sync_api import expect

    job_id = jobd.ok("submit", "--name", "listed", "-p", "vision", "--", "sleep", "60").strip()
    jobd.wait_phase(job_id, "Running")
    page.reload()
    row = page.locator(f"tr[data-job='{job_id}']")
    expect(row).to_contain_text("listed")
    expect(row).to_contain_text("vision")
    expect(row.locator("td").nth(4)).to_have_text("Running")
    _shot(page, "jobs")
    jobd.ok("cancel", job_id)  # the row follows without a reload
    expect(row.locator("td").nth(4)).to_have_text("Cancelled")
    page.goto(f"{jobd.url}/ui?project=vision&phase=Cancelled")
    expect(page.locator("tr.job")).to_have_count(1)
    page.goto(f"{jobd.url}/ui?phase=Running")
    expect(page.locator(f"tr[data-job='{job_id}']")).to_have_count(0)


def test_a_jobs_output_arrives_live_on_its_page(page: Page, jobd: Jobd) -> None:
    from playwright.sync_api import expect

    command = write_script(jobd.root, "talker.py", TALKER)
    job_id = jobd.ok("submit", "--name", "talker", "--", *command).strip()
    page.goto(f"{jobd.url}/ui/jobs/{job_id}")
    log = page.locator("#log")
    expect(log).to_contain_text("line 2")
    assert "line 25" not in log.inner_text()  # not yet printed when the page opened
    page.evaluate("window.sameDocument = true")
    expect(page.locator("#job-live progress")).to_be_visible()  # progress, live too
    expect(log).to_contain_text("line 30", timeout=30_000)
    expect(page.locator("#phase")).to_have_text("Succeeded")
    expect(page.locator("#job-live")).to_contain_text("step 30/30")
    expect(page.locator("#log-state")).to_contain_text("ended")
    assert page.evaluate("window.sameDocument") is True  # no reload brought them
    said = [line for line in log.inner_text().splitlines() if not line.startswith("jobd-progress")]
    assert said == [f"line {i}" for i in range(1, 31)]
    _shot(page, "job")


def test_the_timeline_shows_a_preemption_its_checkpoint_and_resume(page: Page, jobd: Jobd) -> None:
    from playwright.sync_api import expect

    command = write_script(jobd.root, "checkpointer.py", CHECKPOINTER)
    submit = ["submit", "--name", "saver", "--checkpoint-grace", "20", "--", *command]
    job_id = jobd.ok(*submit).strip()
    jobd.wait_phase(job_id, "Running")
    _wait_for_output(jobd, job_id, "ready")  # its handler is installed once it says so
    jobd.ok("preempt", job_id)
    jobd.wait_phase(job_id, "Preempted")
    resumed = jobd.ok("resume", job_id).strip()
    page.goto(f"{jobd.url}/ui/timeline")
    row = page.locator(f"tr.preemption[data-job='{job_id}']")
    expect(row).to_contain_text("manual")
    expect(row.locator("td.checkpoint")).to_contain_text("completed")
    expect(row).to_contain_text("Preempted")
    expect(row.locator("td.resumed a")).to_have_attribute("href", f"/ui/jobs/{resumed}")
    _shot(page, "timeline")
    row.locator("td.resumed a").click()
    expect(page.locator("h1")).to_contain_text(f"Job {resumed}")
    expect(page.locator("#job-live")).to_contain_text(f"job {job_id}")  # what it resumes
    page.goto(f"{jobd.url}/ui/workers")
    expect(page.locator("table.workers")).to_contain_text("w1")
    _shot(page, "workers")
    jobd.ok("cancel", resumed)
