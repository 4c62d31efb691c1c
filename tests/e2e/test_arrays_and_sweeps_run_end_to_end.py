"""Job arrays and sweeps as a user runs them: `job submit --array/--sweep`, then `job get`,
`wait`, `cancel`, `delete` on `A<id>`, and a job that depends on an array."""

from __future__ import annotations

import json
import sys

from tests.e2e.harness import REPO, Jobd

SHOW = "import os, sys; print(os.environ['JOBD_ARRAY_INDEX'], *sys.argv[1:])"


def _members(jobd: Jobd, array: str) -> list[dict[str, object]]:
    members: list[dict[str, object]] = json.loads(jobd.ok("get", array, "-o", "json"))["status"][
        "members"
    ]
    return members


def test_an_array_of_four_runs_each_member_with_its_index(jobd: Jobd) -> None:
    array = jobd.ok("submit", "--array", "0-3", "--", sys.executable, "-c", SHOW, "{i}").strip()
    assert array.startswith("A")
    assert jobd.job("wait", array).returncode == 0
    members = _members(jobd, array)
    assert [m["index"] for m in members] == [0, 1, 2, 3]
    for member in members:
        out = jobd.ok("logs", str(member["id"]))
        assert out.split() == [str(member["index"])] * 2
    line = jobd.ok("get", array).strip()
    assert line == f"{array} array-{array[1:]} 4 jobs: 4 Succeeded"
    assert line in jobd.ok("get", "arrays").splitlines()
    labelled = jobd.ok("get", "-l", f"jobd/array=array-{array[1:]}", "-o", "json")
    assert len(json.loads(labelled)) == 4


def test_a_sweep_of_six_substitutes_every_combination(jobd: Jobd) -> None:
    command = [sys.executable, "-c", SHOW, "--lr", "{lr}", "--seed={seed}", "{other}"]
    flags = ["--name", "sweep-lr", "--sweep", "lr=1e-3,3e-4", "--sweep", "seed=1,2,3"]
    array = jobd.ok("submit", *flags, "--", *command).strip()
    assert jobd.job("wait", array).returncode == 0
    outputs = [jobd.ok("logs", str(m["id"])).split() for m in _members(jobd, array)]
    expected = [
        [str(i), "--lr", lr, f"--seed={seed}", "{other}"]
        for i, (lr, seed) in enumerate((lr, s) for lr in ("1e-3", "3e-4") for s in "123")
    ]
    assert outputs == expected
    assert jobd.ok("get", "sweep-lr").strip() == f"{array} sweep-lr 6 jobs: 6 Succeeded"


def test_waiting_for_an_array_fails_when_one_member_fails(jobd: Jobd) -> None:
    code = "import sys; sys.exit(3 if sys.argv[1] == '1' else 0)"
    array = jobd.ok("submit", "--array", "0-2", "--", sys.executable, "-c", code, "{i}").strip()
    waited = jobd.job("wait", array)
    assert waited.returncode == 3, waited.stderr
    assert jobd.ok("get", array).strip().endswith("3 jobs: 2 Succeeded, 1 Failed")


def test_cancel_reaches_every_member_and_delete_removes_the_array(jobd: Jobd) -> None:
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    array = jobd.ok("submit", "--array", "0-2", "--", *sleep).strip()
    assert jobd.ok("cancel", array).strip() == f"array/{array} cancel requested (3 jobs)"
    assert jobd.job("wait", array, "--timeout", "30").returncode == 201  # Cancelled
    assert {m["phase"] for m in _members(jobd, array)} == {"Cancelled"}
    deleted = jobd.ok("delete", array).strip()
    assert deleted == f"array/{array} deleted (3 jobs)"
    assert "not found" in jobd.job("get", array).stderr


def test_a_job_depending_on_an_array_starts_after_every_member(jobd: Jobd) -> None:
    work = [sys.executable, "-c", "import time, sys; time.sleep(0.3 * int(sys.argv[1]))", "{i}"]
    array = jobd.ok("submit", "--array", "1-3", "--", *work).strip()
    after = jobd.ok("submit", "--depends-on", array, "--", sys.executable, "-c", "pass").strip()
    child = jobd.wait_phase(after, "Succeeded")
    ends = [jobd.get(str(m["id"]))["status"]["finished_at"] for m in _members(jobd, array)]
    assert child["status"]["started_at"] >= max(ends)


def test_bad_array_flags_are_usage_errors_and_make_nothing(jobd: Jobd) -> None:
    before = jobd.ok("get", "arrays", "-o", "json")
    for flags in (["--array", "3-1"], ["--sweep", "lr"], ["--array", "0", "--sweep", "a=1"]):
        bad = jobd.job("submit", *flags, "--", sys.executable, "-c", "pass")
        assert bad.returncode == 2 and bad.stderr.startswith("error: --"), bad.stderr
        assert len(bad.stderr.splitlines()) == 1 and bad.stdout == ""
    assert jobd.ok("get", "arrays", "-o", "json") == before


def test_the_example_manifest_applies_once_and_runs(jobd: Jobd) -> None:
    text = (REPO / "examples" / "sweep-lr.yaml").read_text().replace("sweep-lr", "example")
    assert jobd.ok("apply", "-f", "-", input=text).strip() == "array/example created"
    assert jobd.ok("apply", "-f", "-", input=text).strip() == "array/example unchanged"
    same = jobd.job("diff", "-f", "-", input=text)
    assert (same.returncode, same.stdout) == (0, ""), same.stdout + same.stderr
    assert jobd.job("wait", "array/example").returncode == 0
    assert jobd.ok("logs", "example-4").strip() == "member 4: lr=3e-4 seed=2"
