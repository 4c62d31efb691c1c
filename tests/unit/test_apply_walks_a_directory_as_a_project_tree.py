"""`job apply -f DIR`: hidden entries and files that are not jobd manifests are left out,
each with a note; a file named on its own is read whatever it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobd.api.manifests import ManifestError, load_path

JOB = "apiVersion: jobd/v1\nkind: Job\nmetadata: {name: %s}\nspec: {command: [true]}\n"


def _tree(root: Path) -> None:
    (root / "jobs").mkdir()
    (root / "jobs" / "b.yaml").write_text(JOB % "b")
    (root / "a.yml").write_text(JOB % "a")
    (root / "projects.yaml").write_text("projects: {p1: {priority: 5}}\n")
    (root / "package.json").write_text('{"name": "web", "version": "1.0.0"}')
    (root / "ci.yaml").write_text("steps: [build, test]\n")
    (root / "notes.txt").write_text("not a manifest at all")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "broken.json").write_text("{not json")
    (root / ".hidden.yaml").write_text(JOB % "hidden")


def test_a_directory_yields_only_its_jobd_manifests_with_notes(tmp_path: Path) -> None:
    _tree(tmp_path)
    notes: list[str] = []

    docs = load_path(tmp_path, note=notes.append)

    names = [d.data["metadata"]["name"] for d in docs]
    assert names == ["a", "b", "p1"]  # sorted by path: a.yml, jobs/b.yaml, projects.yaml
    assert sorted(notes) == sorted(
        [
            f"skipped {tmp_path / '.venv'}/: hidden",
            f"skipped {tmp_path / '.hidden.yaml'}: hidden",
            f"skipped {tmp_path / 'ci.yaml'}: not a jobd manifest",
            f"skipped {tmp_path / 'package.json'}: not a jobd manifest",
        ]
    )


def test_a_file_named_on_its_own_is_read_as_it_is(tmp_path: Path) -> None:
    _tree(tmp_path)

    assert load_path(tmp_path / "package.json")[0].data["name"] == "web"
    with pytest.raises(ManifestError, match="not valid YAML or JSON"):
        load_path(tmp_path / ".venv" / "lib" / "broken.json")


def test_a_broken_manifest_in_a_directory_is_still_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: Job\nspec: [\n")

    with pytest.raises(ManifestError, match=r"bad\.yaml"):
        load_path(tmp_path)
