"""A user's first minutes: apply a manifest, watch it succeed, read its logs, apply again."""

from __future__ import annotations

import json
import sys

from tests.e2e.harness import Jobd

HELLO = f"""\
apiVersion: jobd/v1
kind: Job
metadata:
  name: hello
  labels: {{tour: "yes"}}
spec:
  command: [{sys.executable}, -c, "print('hello from jobd'); print('second line')"]
"""


def test_apply_runs_to_succeeded_and_logs_are_readable(jobd: Jobd) -> None:
    (jobd.root / "hello.yaml").write_text(HELLO)
    assert jobd.ok("apply", "-f", "hello.yaml").strip() == "job/hello created"
    doc = jobd.wait_phase("hello", "Succeeded")
    assert doc["status"]["exit_code"] == 0
    assert doc["status"]["desired_phase"] == "Succeeded"
    assert jobd.ok("logs", "-f", "hello") == "hello from jobd\nsecond line\n"
    phases = [e["event"] for e in jobd.events(job=doc["metadata"]["id"])]
    for expected in ("job_created", "job_scheduled", "job_started", "job_finished"):
        assert expected in phases


def test_reapply_is_unchanged_and_a_label_edit_is_configured(jobd: Jobd) -> None:
    (jobd.root / "hello.yaml").write_text(HELLO)
    jobd.ok("apply", "-f", "hello.yaml")
    assert jobd.ok("apply", "-f", "hello.yaml").strip() == "job/hello unchanged"
    (jobd.root / "relabel.yaml").write_text(HELLO.replace('tour: "yes"', 'tour: "no"'))
    assert jobd.ok("apply", "-f", "relabel.yaml").strip() == "job/hello configured"


def test_diff_exit_codes_follow_kubectl(jobd: Jobd) -> None:
    (jobd.root / "hello.yaml").write_text(HELLO)
    jobd.ok("apply", "-f", "hello.yaml")
    same = jobd.job("diff", "-f", "hello.yaml")
    assert same.returncode == 0, same.stderr
    (jobd.root / "new.yaml").write_text(HELLO.replace("name: hello", "name: hello-two"))
    differs = jobd.job("diff", "-f", "new.yaml")
    assert differs.returncode == 1
    assert "hello-two" in differs.stdout
    (jobd.root / "broken.yaml").write_text("kind: Job\nspec: [\n")
    broken = jobd.job("diff", "-f", "broken.yaml")
    assert broken.returncode > 1


def test_malformed_manifest_names_file_line_and_field_and_changes_nothing(jobd: Jobd) -> None:
    before = json.loads(jobd.ok("get", "-o", "json"))
    bad = HELLO.replace("name: hello", "name: other") + "  priorty: 3\n"
    (jobd.root / "bad.yaml").write_text("---\n" + HELLO.replace("hello", "fine") + "---\n" + bad)
    result = jobd.job("apply", "-f", "bad.yaml")
    assert result.returncode != 0
    assert "bad.yaml:17: spec.priorty: unknown field" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert json.loads(jobd.ok("get", "-o", "json")) == before


def test_grace_over_cap_is_refused_naming_the_cap(jobd: Jobd) -> None:
    result = jobd.job("submit", "--checkpoint-grace", "301", "--", "true")
    assert result.returncode != 0
    assert "300" in result.stderr
    (jobd.root / "grace.yaml").write_text(
        HELLO.replace("spec:\n", "spec:\n  checkpoint_grace_s: 400\n")
    )
    refused = jobd.job("apply", "-f", "grace.yaml")
    assert refused.returncode != 0 and "300 s cap" in refused.stderr
