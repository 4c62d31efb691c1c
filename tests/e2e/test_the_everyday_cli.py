"""The `job` command as a kubectl, Slurm or pueue user tries it, against one real `jobd dev`.

A typo'd option refused before anything is made; `job wait` passing the job's own exit
code through (128+N for a signal); names printed pasted back; several jobs and `-l`;
`-o json` on every verb that prints; rerun, --shell, --export; logs --tail/--since;
events -f from now; a second jobd on a taken port refused before the store is touched.
Every test cleans up after itself (by label), since the module shares one broker.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from jobd.cli.job_main import cli
from tests.e2e.harness import BIN, Jobd, manifest, start_jobd, stop_jobd

PY = sys.executable


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    """One `jobd dev` for the module: three slots, the sweeper at its defaults (silent)."""
    running = start_jobd(tmp_path_factory.mktemp("cli"), "--slots", "3")
    yield running
    stop_jobd(running)


def _ids(jobd: Jobd, *args: str) -> list[int]:
    return [int(j["metadata"]["id"]) for j in json.loads(jobd.ok("get", "-o", "json", *args))]


def _end_all(jobd: Jobd, label: str) -> None:
    """Cancel what is still live of a test's jobs, and wait for them to end."""
    live = [
        str(i)
        for i in _ids(jobd, "-l", label)
        if jobd.get(i)["status"]["phase"] not in ("Succeeded", "Failed", "Cancelled", "Preempted")
    ]
    if live:
        jobd.job("cancel", *live)
        jobd.job("wait", *live, "--timeout", "30")


def test_a_typod_option_is_refused_and_no_job_is_made(jobd: Jobd) -> None:
    before = _ids(jobd)

    for typo in (["--nmae", "x"], ["--gpu", "1"]):
        result = jobd.job("submit", *typo, "--", PY, "-c", "print(1)")
        assert result.returncode == 2
        assert result.stderr.startswith(f"error: no such option '{typo[0]}'")
        assert len(result.stderr.splitlines()) == 1 and result.stdout == ""

    assert _ids(jobd) == before
    # Options end at the command's first word: what follows is the command's.
    job_id = jobd.ok("submit", "--wait", PY, "-c", "import sys; print(sys.argv)", "--lr", "3")
    assert jobd.ok("logs", job_id.strip()) == "['-c', '--lr', '3']\n"


def test_wait_exits_with_the_jobs_own_code_and_128_plus_a_signal(jobd: Jobd) -> None:
    three = jobd.ok("submit", "--", PY, "-c", "raise SystemExit(3)").strip()
    assert jobd.job("wait", three).returncode == 3

    submitted = jobd.job("submit", "--wait", "--", PY, "-c", "raise SystemExit(3)")
    assert submitted.returncode == 3 and submitted.stdout.strip().isdigit()
    assert submitted.stderr.endswith("Failed (exit code 3)\n")

    # --shell runs through sh -c, on purpose: the job kills its own shell.
    killed = jobd.job("submit", "--wait", "--shell", "echo hi | tr a-z A-Z; kill -TERM $$")
    assert killed.returncode == 128 + 15
    assert "(signal 15, SIGTERM)" in killed.stderr
    assert jobd.ok("logs", killed.stdout.strip()) == "HI\n"


def test_wait_says_cancelled_and_a_timeout_with_codes_of_their_own(jobd: Jobd) -> None:
    job_id = jobd.ok("submit", "--name", "napper", "--", "sleep", "60").strip()
    timed_out = jobd.job("wait", job_id, "--timeout", "0.5")
    assert timed_out.returncode == 124
    assert "the wait timed out" in timed_out.stderr

    jobd.ok("cancel", "napper")
    assert jobd.job("wait", "napper").returncode == 201


def test_names_printed_are_names_taken(jobd: Jobd) -> None:
    sleeper = ["sleep", "60"]
    docs = [manifest("urgent", sleeper), manifest("urgent", sleeper, project="p1")]
    applied = jobd.ok("apply", "-f", "-", input="\n---\n".join(docs)).splitlines()
    assert applied == ["job/urgent created", "job/p1/urgent created"]
    try:
        for printed, project in (("job/urgent", "default"), ("job/p1/urgent", "p1")):
            assert jobd.get(printed)["metadata"]["project"] == project
        # A bare name several projects have is the default project's, as apply printed it.
        assert jobd.get("urgent")["metadata"]["project"] == "default"
        table = jobd.ok("get", "job/p1/urgent").splitlines()
        job_id, name = table[1].split()[:2]
        assert name == "p1/urgent" and jobd.get(name)["metadata"]["id"] == int(job_id)
        assert jobd.get(f"job/{job_id}")["metadata"]["name"] == "urgent"
        cancelled = jobd.ok("cancel", "job/urgent", "job/p1/urgent").splitlines()
        assert [line.split()[0] for line in cancelled] == [
            f"job/{jobd.get('job/urgent')['metadata']['id']}",
            f"job/{job_id}",
        ]
    finally:
        jobd.job("cancel", "default/urgent", "p1/urgent")
        jobd.job("wait", "default/urgent", "p1/urgent", "--timeout", "30")
        jobd.ok("delete", "default/urgent", "p1/urgent")


def _labelled(name: str, team: str) -> str:
    doc = json.loads(manifest(name, ["sleep", "60"]))
    doc["metadata"]["labels"] = {"team": team, "test": "several"}
    return json.dumps(doc)


def test_several_jobs_and_a_label_selector(jobd: Jobd, tmp_path: Path) -> None:
    docs = [_labelled("v1", "vision"), _labelled("v2", "vision"), _labelled("n1", "nlp")]
    path = tmp_path / "team.yaml"
    path.write_text("\n---\n".join(docs))
    jobd.ok("apply", "-f", str(path))
    try:
        vision = _ids(jobd, "-l", "team=vision")
        assert [jobd.get(i)["metadata"]["name"] for i in vision] == ["v1", "v2"]

        result = jobd.job("cancel", "-l", "team=vision", "999999")
        assert result.returncode == 1  # 999999 is not a job: said, and the rest went on
        assert result.stderr == "error: job 999999 not found\n"
        assert len(result.stdout.splitlines()) == 2
        waited = jobd.job("wait", "-l", "team=vision")
        assert waited.returncode == 201  # Cancelled
        assert jobd.get("n1")["status"]["phase"] in ("Scheduled", "Running")

        jobd.ok("cancel", "n1")
        jobd.job("wait", "n1")
        deleted = jobd.ok("delete", "-f", str(path)).splitlines()
        assert len(deleted) == 3 and all(line.endswith(" deleted") for line in deleted)
        assert _ids(jobd, "-l", "test=several") == []
    finally:
        _end_all(jobd, "test=several")


def test_every_verb_that_prints_prints_json(jobd: Jobd, tmp_path: Path) -> None:
    """Walks every verb of `job`: each prints a JSON document with -o json, or is one of
    the few whose output is not documents (a job's own output, a diff)."""
    no_documents = {"logs", "diff", "completion"}  # completion prints a shell script
    runs: dict[str, list[list[str]]] = {}
    low = ["-p", "walk", "--priority", "1", "--preemptible", "--checkpoint-grace", "1"]

    def as_json(verb: str, *args: str) -> Any:
        runs.setdefault(verb, []).append(list(args))
        result = jobd.job(verb, "-o", "json", *args)
        assert result.returncode in (0, 202), f"job {verb} {args}: {result.stderr}"
        return json.loads(result.stdout)

    project = json.dumps({"apiVersion": "jobd/v1", "kind": "Project", "metadata": {"name": "walk"}})
    (tmp_path / "walk.yaml").write_text(project)
    assert as_json("apply", "-f", str(tmp_path / "walk.yaml"))[0]["kind"] == "Project"
    victim = as_json("submit", *low, "--", "sleep", "60")["metadata"]["id"]
    other = as_json("submit", *low, "--", "sleep", "60")["metadata"]["id"]
    filler = as_json("submit", *low, "--", "sleep", "60")["metadata"]["id"]
    for job_id in (victim, other, filler):
        jobd.wait_phase(job_id, "Running")
    queued = as_json("submit", "-p", "walk", "--priority", "90", "--", "true")["metadata"]["id"]
    try:
        assert as_json("get", str(victim))["metadata"]["id"] == victim
        assert any(p["metadata"]["name"] == "walk" for p in as_json("get", "projects"))
        assert as_json("get", "project/walk")["kind"] == "Project"
        assert as_json("get", "workers")[0]["kind"] == "Worker"
        assert as_json("workers")[0]["metadata"]["name"] == "w1"
        assert as_json("describe", str(victim))["job"]["metadata"]["id"] == victim
        assert isinstance(as_json("status"), list)
        shown = as_json("top", "-p", "walk")  # what one view shows: the queued job waits
        assert [j["metadata"]["id"] for j in shown["queued"]] == [queued], shown
        assert shown["workers"][0]["kind"] == "Worker" and len(shown["running"]) == 3
        assert isinstance(as_json("events", "--job", str(victim)), list)
        assert as_json("whoami")["admin"] is True
        assert "half_life_s" in as_json("usage")
        plan = as_json("preempt-blockers", "--dry-run", str(queued))
        assert plan["dry_run"] is True and plan["candidate"] == queued
        why = as_json("explain", str(queued))
        assert (why["job"], why["reason"]) == (queued, "WaitingForCapacity")
        assert [v["job"] for v in why["preemption"]["victims"]] == [
            v["metadata"]["id"] for v in plan["victims"]
        ]
        assert as_json("preempt", str(victim))["status"]["desired_phase"] == "Preempted"
        assert as_json("wait", str(victim))["status"]["phase"] == "Preempted"
        resumed = as_json("resume", "--from-scratch", str(victim))["metadata"]["id"]
        rerun = as_json("rerun", str(victim))["metadata"]["labels"]["jobd/reruns"]
        assert rerun == str(victim)
        assert as_json("cancel", "-l", "jobd/reruns")[0]["metadata"]["id"] != victim
        assert len(as_json("cancel", str(other), str(resumed), str(filler))) == 3
        assert as_json("delete", str(victim))["metadata"]["id"] == victim
        assert as_json("cordon", "w1")["spec"]["cordoned"] is True
        assert as_json("drain", "w1", "--timeout", "30")["drained"] is True
        assert as_json("uncordon", "w1")["spec"]["cordoned"] is False
        login = as_json("ui", "--no-open")
        assert "/ui/login?code=" in login["url"] and login["expires_in_s"] > 0
        runs["config"] = [["view"]]  # a group: its -o follows the subverb
        assert json.loads(jobd.ok("config", "view", "-o", "json")) == {"contexts": {}}
    finally:
        jobd.job("uncordon", "w1")
        for job_id in _ids(jobd, "-p", "walk"):
            jobd.job("cancel", str(job_id))
    walked = set(runs) | no_documents
    verbs = set(cli.list_commands(click.Context(cli)))
    assert walked == verbs, f"verbs not walked: {verbs - walked}"


def test_rerun_copies_an_ended_job_and_export_copies_the_environment(jobd: Jobd) -> None:
    env = {**jobd.env, "FOO": "from-me", "BAR": "also"}
    printed = "import os; print(os.environ.get('FOO'), os.environ.get('BAR'))"
    submit = ["submit", "--name", "exported", "--export", "FOO,BAR", "--env", "BAR=mine"]
    first = subprocess.run(
        [str(BIN / "job"), *submit, "--wait", "--", PY, "-c", printed],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert jobd.ok("logs", first) == "from-me mine\n"

    running = jobd.job("rerun", "exported", "--name", "exported-2", "--env", "FOO=again")
    assert running.returncode == 0, running.stderr
    again = running.stdout.strip()
    assert jobd.job("wait", again).returncode == 0
    assert jobd.ok("logs", again) == "again mine\n"
    assert jobd.get(again)["metadata"]["labels"] == {"jobd/reruns": first}

    live = jobd.ok("submit", "--", "sleep", "60").strip()
    refused = jobd.job("rerun", live)
    assert refused.returncode == 1 and "rerun copies a job that has ended" in refused.stderr
    jobd.ok("cancel", live)


COUNTER = """\
import sys, time
for i in range(100):
    print("line", i, flush=True)
time.sleep(5)
print("late", flush=True)
"""


def test_logs_tail_and_since(jobd: Jobd) -> None:
    script = jobd.root / "counter.py"
    script.write_text(COUNTER)
    job_id = jobd.ok("submit", "--", PY, str(script)).strip()
    deadline = time.monotonic() + 20
    while "line 99" not in jobd.ok("logs", job_id):
        assert time.monotonic() < deadline
        time.sleep(0.1)

    assert jobd.ok("logs", job_id, "--tail", "2") == "line 98\nline 99\n"
    time.sleep(1.5)  # the lines arrived more than a second ago; "late" comes at 5 s
    assert jobd.ok("logs", job_id, "--since", "1s") == ""
    followed = jobd.ok("logs", job_id, "--tail", "1", "-f", "--since", "1h")
    assert followed == "line 99\nlate\n"
    assert jobd.ok("logs", job_id, "--since", "3s") == "late\n"
    assert jobd.ok("logs", job_id, "--since", "10m").count("\n") == 101
    bad = jobd.job("logs", job_id, "--since", "ten minutes")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_events_follow_from_now_unless_all(jobd: Jobd) -> None:
    before = jobd.ok("submit", "--wait", "--", "true").strip()
    parent = jobd.ok("submit", "--", "sleep", "60").strip()
    follower = subprocess.Popen(
        [str(BIN / "job"), "events", "-f", "-o", "json"],
        env=jobd.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    markers: list[int] = []
    try:
        assert follower.stdout is not None
        # Each marker waits on `parent`, so its one event is job_created: whenever the
        # follower's "now" falls, the first line it prints is a marker's creation.
        deadline = time.monotonic() + 30
        while not select.select([follower.stdout], [], [], 0.5)[0]:
            assert time.monotonic() < deadline, "job events -f printed nothing"
            marker = jobd.ok("submit", "--depends-on", parent, "--", "true").strip()
            markers.append(int(marker))
        first = json.loads(follower.stdout.readline())
    finally:
        follower.terminate()
        follower.wait(10)
        jobd.ok("cancel", parent)
    assert first["event"] == "job_created" and first["job"] in markers
    assert "seq" not in first  # the events.jsonl line, as the file has it

    with subprocess.Popen(
        [str(BIN / "job"), "events", "-f", "--all", "-o", "json"],
        env=jobd.env,
        stdout=subprocess.PIPE,
        text=True,
    ) as everything:
        assert everything.stdout is not None
        seen = [json.loads(everything.stdout.readline()) for _ in range(3)]
        everything.terminate()
    assert seen[0]["event"] == "worker_registered"  # the record's first, then on
    table = jobd.ok("events", "--job", before).splitlines()
    assert table[0].split() == ["TIME", "EVENT", "JOB", "REASON"]
    assert any("job_finished" in row and "Succeeded (exit 0)" in row for row in table)


def test_a_second_jobd_on_a_taken_port_says_so_before_touching_a_store(
    jobd: Jobd, tmp_path: Path
) -> None:
    port = jobd.url.rsplit(":", 1)[1]
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    made = subprocess.run(
        [str(BIN / "jobd"), "token", "list"],
        env={**jobd.env, "JOBD_DATA_DIR": str(existing)},
        capture_output=True,
        timeout=30,
    )
    assert made.returncode == 0, made.stderr
    store = existing / "jobd.db"
    before = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in existing.iterdir())
    assert store.name in [name for name, _, _ in before]
    runs = [("dev", fresh), ("broker", existing)]
    for program, data_dir in runs:
        args = ["--gpus", "none"] if program == "dev" else []
        result = subprocess.run(
            [str(BIN / "jobd"), program, "--port", port, *args],
            env={**jobd.env, "JOBD_DATA_DIR": str(data_dir)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr == (
            f"jobd: port {port} on 127.0.0.1 is taken: is another jobd running? Stop it, "
            "or start this one with --port N (JOBD_PORT)\n"
        )
    assert not fresh.exists()  # no data dir, no store, no token made
    after = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in existing.iterdir())
    assert after == before  # the store (and its WAL) neither opened nor written
