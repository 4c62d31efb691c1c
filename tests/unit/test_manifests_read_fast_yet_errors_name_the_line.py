"""`job apply -f` reads manifests without positions (fast), yet every error names the
same file, line and field as a read with positions does, and every document reads the
same.

The fast read keeps each document's text so `parse_resource` can read it again with
positions when it fails; these cases would name line 1 (or another line) if it did not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobd.api.manifests import ManifestError, load_documents, parse_resource
from jobd.api.models import dump
from jobd.cli import manifest_files

GOOD = "apiVersion: jobd/v1\nkind: Job\nmetadata: {name: ok-%d}\nspec: {command: [/bin/true]}\n"


def _many(bad: str) -> str:
    """Two good documents, the bad one, a good one after it."""
    return "---\n".join([GOOD % 1, GOOD % 2, bad, GOOD % 3])


BAD = {
    "unknown field": (
        "kind: Job\nmetadata:\n  name: x\nspec:\n  command: [/bin/true]\n  priorty: 3\n"
    ),
    "bad type": "kind: Job\nmetadata: {name: x}\nspec:\n  command: [/bin/true]\n  priority: -1\n",
    "deep field": (
        "kind: Job\nmetadata: {name: x}\nspec:\n  command: [/bin/true]\n"
        "  resources:\n    gpus: many\n"
    ),
    "bad kind": "apiVersion: jobd/v1\n\nkind: Jobb\nmetadata: {name: x}\n",
    "bad apiVersion": "kind: Job\napiVersion: v2\nmetadata: {name: x}\n",
    "not a mapping": "- [1, 2]\n- just text\n",
    "projects form": "projects:\n  ok: {priority: 1}\n  bad:\n    priority: high\n",
    "bad name": "kind: Job\nmetadata:\n  name: Not_A_Name\nspec: {command: [/bin/true]}\n",
}


def _error(text: str, *, positions: bool) -> str:
    with pytest.raises(ManifestError) as caught:
        for doc in load_documents(text, "jobs.yaml", positions=positions):
            parse_resource(doc)
    return str(caught.value)


@pytest.mark.parametrize("case", sorted(BAD))
def test_an_error_names_the_line_a_positioned_read_names(case: str) -> None:
    text = _many(BAD[case])
    expected = _error(text, positions=True)
    assert _error(text, positions=False) == expected
    line = int(expected.split(":")[1])
    if case != "not a mapping":  # a scalar has no position: line 1 either way
        assert line > 10, f"the bad document starts past line 10: {expected}"


def test_a_fast_read_keeps_no_positions_and_reads_the_same_documents() -> None:
    text = _many(
        "kind: Job\nmetadata: {name: rich, labels: {on: 'yes', n: '012'}}\n"
        "spec:\n  command: [python, '*.py']\n  priority: 0x10\n"
        "  resources: {gpus: 0o2}\n"
        "---\n- kind: Job\n  metadata: {name: a}\n  spec:\n    command: [/bin/true]\n"
        "    env: &env {A: '1'}\n"
        "- kind: Job\n  metadata: {name: merged}\n  spec:\n    command: [/bin/true]\n"
        "    env: {<<: *env, B: '2'}\n"
    )
    fast = load_documents(text, "jobs.yaml", positions=False)
    positioned = load_documents(text, "jobs.yaml")
    assert all(d.text is not None for d in fast)  # read fast: an error can read it again
    assert all(d.text is None for d in positioned)
    assert _resources(fast) == _resources(positioned)
    rich = _resources(fast)[2]["spec"]
    # YAML 1.2, as the round-trip loader reads it: `on` is a word, 0o2 and 0x10 numbers.
    assert _resources(fast)[2]["metadata"]["labels"] == {"on": "yes", "n": "012"}
    assert rich["resources"]["gpus"] == 2
    assert _resources(fast)[4]["spec"]["env"] == {"A": "1", "B": "2"}
    assert rich["priority"] == 16


def test_what_the_fast_loader_cannot_read_is_read_as_before() -> None:
    """A tag the safe loader refuses: the round-trip loader reads the text, as it did."""
    text = "kind: Job\nmetadata: {name: tagged}\nspec: {command: [!!str true]}\n"
    (doc,) = load_documents(text, "jobs.yaml", positions=False)
    assert parse_resource(doc).spec.command == ["true"]  # type: ignore[union-attr]
    broken = text + "---\nkind: Job\nspec: {command: [\n"
    with pytest.raises(ManifestError) as positioned:
        load_documents(broken, "jobs.yaml")
    with pytest.raises(ManifestError, match=r"jobs\.yaml:\d+: not valid YAML") as fast:
        load_documents(broken, "jobs.yaml", positions=False)
    assert str(fast.value) == str(positioned.value)


def _resources(docs: list[Any]) -> list[dict[str, Any]]:
    return [dump(parse_resource(d)) for d in docs]


def test_a_big_file_read_in_parts_reads_as_one_and_names_the_same_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job apply -f` of a big file reads it in parts, a process each; nothing changes."""
    used: list[bool] = []
    in_parallel = manifest_files._validated_in_parallel

    def spy(parts: list[str], source: str) -> list[dict[str, Any]] | None:
        found = in_parallel(parts, source)
        used.append(len(parts) > 1 and found is not None)
        return found

    monkeypatch.setattr(manifest_files, "_validated_in_parallel", spy)
    monkeypatch.setattr(manifest_files, "PARALLEL_BYTES", 1)
    good = tmp_path / "jobs.yaml"
    good.write_text("---\n".join(GOOD % i for i in range(40)))
    docs = manifest_files.load_manifests([str(good)])
    assert used == [True] and [d["metadata"]["name"] for d in docs] == [
        f"ok-{i}" for i in range(40)
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("---\n".join([*(GOOD % i for i in range(30)), BAD["deep field"], GOOD % 99]))
    with pytest.raises(ManifestError) as caught:
        manifest_files.load_manifests([str(bad)])
    assert str(caught.value) == _error(bad.read_text(), positions=True).replace(
        "jobs.yaml", str(bad)
    )
    assert used == [True, False]  # a part failed: read whole, to name the line
