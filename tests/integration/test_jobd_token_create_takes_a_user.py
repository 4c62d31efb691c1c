"""`jobd token create --user`: a user token of a Unix user, made against a real store; a
name that is no user name is refused in one sentence, and no token is made."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from jobd.daemon.main import cli


def _jobd(data_dir: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["token", *args, "--data-dir", str(data_dir)])
    return result.exit_code, result.stdout, result.stderr


def test_a_user_token_names_its_user(tmp_path: Path) -> None:
    code, out, err = _jobd(tmp_path, "create", "--role", "user", "--user", "alice", "--name", "al")
    assert code == 0, err
    assert out.strip().startswith("jobd_") and "token al (user alice)" in err
    code, out, _ = _jobd(tmp_path, "list", "-o", "json")
    [listed] = json.loads(out)
    assert (listed["label"], listed["role"], listed["user"], listed["projects"]) == (
        "al",
        "user",
        "alice",
        [],
    )


def test_a_name_that_is_no_user_is_refused_and_nothing_made(tmp_path: Path) -> None:
    for hostile in ("../root", "a b", "x" * 33, "-rf"):
        code, out, err = _jobd(tmp_path, "create", "--role", "user", "--user", hostile)
        assert code == 1 and out == ""
        assert f"{hostile!r} is not a user name" in err
    code, _, err = _jobd(tmp_path, "create", "--role", "admin", "--user", "alice")
    assert code == 1 and "only user tokens take a user" in err
    code, _, err = _jobd(tmp_path, "create", "--role", "user")
    assert code == 1 and "needs its user (--user) or a project (--project)" in err
    code, out, _ = _jobd(tmp_path, "list", "-o", "json")
    assert json.loads(out) == []
