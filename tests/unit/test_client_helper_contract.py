"""jobd.client against real processes and real SIGTERMs: the workload half of path-B preemption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SENTINEL = b"jobd-checkpoint-complete"
THIRD_PARTY = {
    "pydantic",
    "anyio",
    "httpx",
    "structlog",
    "fastapi",
    "sqlalchemy",
    "ruamel",
    "click",
    "rich",
    "numpy",
}

# A workload: installs the handler, says READY (with time_remaining() before any SIGTERM),
# then idles or keeps printing until signalled. FN_BODY is the checkpoint function's body.
WORKLOAD = """
import os, sys, time
from jobd.client import install_preemption_handler, time_remaining

def checkpoint(remaining):
{fn_body}

install_preemption_handler(checkpoint)
print(f"READY {{time_remaining()!r}}", flush=True)
while True:
    {loop_body}
"""


def _env(grace: str | None, local_rank: str | None = None) -> dict[str, str]:
    unset = ("JOBD_CHECKPOINT_GRACE_S", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPATH"] = str(REPO)
    if grace is not None:
        env["JOBD_CHECKPOINT_GRACE_S"] = grace
    if local_rank is not None:
        env["LOCAL_RANK"] = local_rank
    return env


def _start(
    fn_body: str,
    grace: str | None = "30",
    loop_body: str = "time.sleep(0.05)",
    local_rank: str | None = None,
) -> tuple[subprocess.Popen[bytes], float]:
    source = WORKLOAD.format(fn_body=textwrap.indent(fn_body, "    "), loop_body=loop_body)
    proc = subprocess.Popen(
        [sys.executable, "-c", source],
        cwd=REPO,
        env=_env(grace, local_rank),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith(b"READY "), ready + proc.stderr.read() if proc.stderr else b""
    return proc, float(ready.split()[1])


def _terminate(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=10)
    finally:
        proc.kill()


def test_success_prints_sentinel_and_exits_0() -> None:
    proc, _ = _start("pass")
    out, err = _terminate(proc)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == SENTINEL
    assert out.count(SENTINEL) == 1


def test_fn_gets_the_grace_and_time_remaining_counts_down() -> None:
    fn_body = """
first = time_remaining()
time.sleep(0.3)
second = time_remaining()
print("REPORT " + json.dumps([remaining, first, second]), flush=True)
"""
    proc, before = _start("import json\n" + fn_body, grace="7.5")
    out, err = _terminate(proc)
    assert proc.returncode == 0, err
    remaining, first, second = json.loads(out.split(b"REPORT ")[1].splitlines()[0])
    assert before == 7.5  # before SIGTERM: the whole grace
    assert 7.0 < remaining <= 7.5
    assert first <= remaining
    assert 0.25 < first - second < 1.5
    assert SENTINEL in out


@pytest.mark.parametrize("grace", [None, "", "soon", "-5", "nan", "inf"])
def test_grace_falls_back_to_60_when_absent_or_invalid(grace: str | None) -> None:
    proc, before = _start("pass", grace=grace)
    _terminate(proc)
    assert before == 60.0


def test_raising_fn_exits_1_with_traceback_and_no_sentinel() -> None:
    proc, _ = _start("raise RuntimeError('disk full while saving')")
    out, err = _terminate(proc)
    assert proc.returncode == 1
    assert SENTINEL not in out
    assert b"Traceback" in err
    assert b"RuntimeError: disk full while saving" in err


def test_second_sigterm_during_checkpoint_is_ignored() -> None:
    fn_body = """
print("IN_FN", flush=True)
time.sleep(0.5)
"""
    proc, _ = _start(fn_body)
    assert proc.stdout is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline() == b"IN_FN\n"
    out, err = _terminate(proc)
    assert proc.returncode == 0, err
    assert out.count(SENTINEL) == 1


def test_sigterm_in_the_middle_of_buffered_prints_still_reports() -> None:
    # The main loop is always inside print(); the handler must not die on a reentrant flush.
    proc, _ = _start("pass", loop_body='print("x" * 997)')
    out, err = _terminate(proc)
    assert proc.returncode == 0, err
    assert out.rstrip(b"\n").endswith(SENTINEL)
    assert b"reentrant" not in err


def _modules_after(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        cwd=REPO,
        env=_env("30"),
        capture_output=True,
        check=True,
    )
    modules: list[str] = json.loads(result.stdout.splitlines()[-1])
    return modules


def test_import_pulls_in_only_the_standard_library() -> None:
    baseline = set(_modules_after("pass"))
    loaded = set(_modules_after("import jobd.client"))
    assert sorted(m for m in loaded if m.startswith("jobd")) == ["jobd", "jobd.client"]
    assert not {m.split(".")[0] for m in loaded} & THIRD_PARTY
    added = {m.split(".")[0] for m in loaded - baseline} - {"jobd"}
    assert added <= set(sys.stdlib_module_names), added - set(sys.stdlib_module_names)


def test_a_script_written_for_the_token_name_runs_unchanged() -> None:
    """Other implementations call the sentinel CHECKPOINT_COMPLETE_TOKEN and leave printing it
    to the workload's own handler: such a script, as written, tells the worker its checkpoint
    completed, with the line the worker scans for."""
    source = textwrap.dedent(
        """
        import signal, sys, time
        from jobd.client import CHECKPOINT_COMPLETE_TOKEN

        def on_term(signum, frame):
            print(CHECKPOINT_COMPLETE_TOKEN, flush=True)
            sys.exit(0)

        signal.signal(signal.SIGTERM, on_term)
        print("READY 0", flush=True)
        while True:
            time.sleep(0.05)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", source],
        cwd=REPO,
        env=_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"READY")
    out, err = _terminate(proc)
    assert proc.returncode == 0, err
    assert out.splitlines() == [SENTINEL]


@pytest.mark.parametrize(("local_rank", "sentinels"), [(None, 1), ("0", 1), ("1", 0), ("7", 0)])
def test_under_torchrun_one_process_per_host_prints_the_handlers_sentinel(
    local_rank: str | None, sentinels: int
) -> None:
    """torchrun's processes on one host share its output: the one of LOCAL_RANK 0 says it."""
    proc, _ = _start("print('saved', flush=True)", local_rank=local_rank)
    out, err = _terminate(proc)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == (SENTINEL if sentinels else b"saved")
    assert out.count(SENTINEL) == sentinels


@pytest.mark.parametrize(
    ("local_rank", "said"), [(None, True), ("0", True), ("", True), ("1", False)]
)
def test_checkpoint_complete_prints_the_sentinel_after_the_output_on_local_rank_0(
    local_rank: str | None, said: bool
) -> None:
    source = "from jobd.client import checkpoint_complete\nprint('saved')\ncheckpoint_complete()\n"
    done = subprocess.run(
        [sys.executable, "-c", source],
        cwd=REPO, env=_env(None, local_rank), capture_output=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ([b"saved", SENTINEL] if said else [b"saved"])
