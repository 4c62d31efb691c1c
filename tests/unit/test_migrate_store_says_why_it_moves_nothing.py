"""`jobd migrate-store`'s refusals before any database is opened: one sentence on stderr,
and the exit code the docs give (1 not moved, 2 a usage error); nothing is created."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from jobd.daemon.main import cli


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["migrate-store", *args])
    return result.exit_code, result.stderr


def test_a_source_with_no_file_is_refused_and_not_created(tmp_path: Path) -> None:
    code, said = _run("--from", f"sqlite:///{tmp_path}/none.db", "--to", "postgresql://x/y")
    assert code == 1
    assert said == f"jobd: error: there is no store at {tmp_path}/none.db (--from names no file)\n"
    assert not (tmp_path / "none.db").exists()


def test_the_same_store_twice_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobd.db"
    code, said = _run("--from", url, "--to", url)
    assert code == 1 and "--from and --to name the same store" in said


def test_both_ends_are_required_and_listed_by_jobd_help() -> None:
    code, said = _run("--from", "sqlite:///x.db")
    assert code == 2 and "Missing option '--to'" in said
    listed = CliRunner().invoke(cli, ["--help"])
    assert "migrate-store" in listed.output


def test_what_is_no_stores_url_is_refused_naming_its_flag(tmp_path: Path) -> None:
    code, said = _run("--from", f"sqlite:///{tmp_path}/a.db", "--to", "db1/jobd")
    assert code == 1
    assert said == (
        "jobd: error: --to: 'db1/jobd' is not a store's URL (sqlite:///PATH or postgresql://...)\n"
    )
    code, said = _run("--from", "mysql://h/db", "--to", "postgresql://h/db")
    assert code == 1 and "--from: 'mysql://h/db' is not a store's URL" in said
