"""A manifest that would make its reader do unbounded work is refused, fast, with where.

An alias bomb ("billion laughs") once ran `job apply -f` past 60 s at 1.1 GB; YAML nested
10,000 deep printed a RecursionError traceback. Both now end in one file:line sentence
within a second, through the real `job` command, before anything reaches a broker.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobd.api.manifests import MAX_DEPTH, ManifestError, load_documents

JOB = Path(sys.executable).parent / "job"


def _alias_bomb(levels: int = 12) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(["kind: Job", "metadata: {name: lol}", "spec:", "  command: [true]", *lines])


def _job_apply(path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    # A broker nobody runs: the file must be refused before any request is made.
    env = {**os.environ, "JOBD_URL": "http://127.0.0.1:9", "JOBD_TOKEN": "unused"}
    started = time.monotonic()
    done = subprocess.run(
        [str(JOB), "apply", "-f", str(path)], env=env, capture_output=True, text=True, timeout=60
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (_alias_bomb(), "aliases expand past 100,000 nodes"),
        ("spec: " + "[" * 10_000 + "]" * 10_000 + "\n", f"nested deeper than {MAX_DEPTH}"),
        (
            "".join(f"{'  ' * i}k{i}:\n" for i in range(2_000)) + "  " * 2_000 + "v\n",
            f"nested deeper than {MAX_DEPTH}",
        ),
        ('{"spec": ' * 5_000 + "1" + "}" * 5_000 + "\n", f"nested deeper than {MAX_DEPTH}"),
    ],
    ids=["alias-bomb", "flow-nesting", "block-nesting", "json-nesting"],
)
def test_job_apply_refuses_it_in_a_sentence_within_a_second(
    tmp_path: Path, text: str, reason: str
) -> None:
    manifest = tmp_path / "hostile.yaml"
    manifest.write_text(text)
    started = time.monotonic()
    with pytest.raises(ManifestError, match=reason):
        load_documents(text, str(manifest))
    assert time.monotonic() - started < 1.0
    done, took = _job_apply(manifest)
    assert done.returncode != 0
    assert f"{manifest}:" in done.stderr and reason in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    # The whole command, interpreter start included, not the minute it took.
    assert took < 5.0, took


def test_the_refusal_costs_little_memory_and_time() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(ManifestError, match="aliases expand past"):
        load_documents(_alias_bomb(levels=30), "bomb.yaml")
    assert time.monotonic() - started < 1.0
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 50, grown_mb


def test_aliases_used_as_people_use_them_still_load() -> None:
    text = (
        "- kind: Job\n  metadata: {name: a}\n"
        "  spec: {command: [true], env: &env {WANDB_MODE: offline}}\n"
        "- kind: Job\n  metadata: {name: b}\n  spec: {command: ['*.txt'], env: *env}\n"
    )
    docs = load_documents(text, "ok.yaml")
    assert [d.data["metadata"]["name"] for d in docs] == ["a", "b"]
    assert docs[1].data["spec"]["env"] == {"WANDB_MODE": "offline"}


def test_a_file_over_the_size_limit_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobd.api import manifests

    monkeypatch.setattr(manifests, "MAX_MANIFEST_BYTES", 1024)
    big = tmp_path / "big.yaml"
    big.write_text("kind: Job\n" + "# padding\n" * 200)
    with pytest.raises(ManifestError, match=r"big\.yaml: 1,025 bytes is over"):
        manifests.load_path(big)


@pytest.mark.anyio
async def test_the_brokers_parser_refuses_deep_nesting_with_422(tmp_path: Path) -> None:
    import httpx

    from jobd.broker.app import create_app
    from jobd.broker.state import BrokerConfig

    app = create_app(BrokerConfig(data_dir=tmp_path / "d", log_dir=tmp_path / "l", token="t"))
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": "Bearer t", "Content-Type": "application/json"}
    deep = '{"a": ' * 10_000 + "1" + "}" * 10_000
    async with httpx.AsyncClient(transport=transport, base_url="http://j", headers=headers) as c:
        for path, body in [("/apply", '{"documents": [' + deep + "]}"), ("/jobs", deep)]:
            started = time.monotonic()
            resp = await c.post(path, content=body)
            assert resp.status_code == 422 and "recursion limit" in resp.json()["detail"]
            assert time.monotonic() - started < 1.0
    app.state.broker.close()


def test_brackets_inside_quotes_are_not_nesting() -> None:
    """The cheap bracket count ignores quotes; the exact check then clears the text."""
    word = "[" * 200
    text = f"kind: Job\nmetadata: {{name: q}}\nspec: {{command: [echo, '{word}']}}\n"
    (doc,) = load_documents(text, "quoted.yaml")
    assert doc.data["spec"]["command"] == ["echo", word]
