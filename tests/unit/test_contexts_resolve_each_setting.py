"""How `job` weighs flags and environment (merged by click), the context and the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobd.cli.contexts import (
    Config,
    ConfigError,
    Context,
    config_path,
    load_config,
    resolve_connection,
    save_config,
)

LAB = "https://gpu1.lab:8765"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("JOBD_CONFIG", raising=False)
    monkeypatch.delenv("JOBD_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("JOBD_DATA_DIR", str(tmp_path / "no-broker-here"))
    token = tmp_path / "lab.token"
    token.write_text("lab-secret\n")
    token.chmod(0o600)
    lab = Context(server=LAB, token_file=str(token), project="vision")
    save_config(Config(current_context="lab", contexts={"lab": lab, "bare": Context()}))
    return config_path()


def test_the_file_lives_under_xdg_config_home(config: Path, tmp_path: Path) -> None:
    assert config == tmp_path / "cfg" / "jobd" / "config.yaml"
    assert config.stat().st_mode & 0o777 == 0o600
    assert "lab-secret" not in config.read_text()
    assert load_config().contexts["lab"].project == "vision"


def test_the_current_context_gives_server_token_and_project(config: Path) -> None:
    chosen = resolve_connection(None, None, None, None)
    assert (chosen.server, chosen.token, chosen.project) == (LAB, "lab-secret", "vision")


def test_flags_and_environment_beat_the_context(config: Path, tmp_path: Path) -> None:
    assert resolve_connection(None, "flag-token", None, None).token == "flag-token"
    other = resolve_connection("http://10.0.0.9:8765", None, None, None)
    assert other.server == "http://10.0.0.9:8765"
    assert other.token is None  # the lab's token is never sent to another server
    own = tmp_path / "own.token"
    own.write_text("own")
    own.chmod(0o600)
    assert resolve_connection(None, "flag-token", own, None).token == "own"


def test_a_named_context_beats_the_current_one_and_defaults_fill_the_rest(config: Path) -> None:
    bare = resolve_connection(None, None, None, "bare")
    assert (bare.server, bare.token, bare.project) == ("http://127.0.0.1:8765", None, None)
    with pytest.raises(ConfigError, match=r"no context 'nope' .*\(contexts: bare, lab\)"):
        resolve_connection(None, None, None, "nope")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("contexts: [", "is not valid YAML"),
        ("contexts: {lab: {server: gpu1}}", "contexts.lab.server: 'gpu1' is not an http://"),
        ("contexts: {lab: {server: 'http://a,gpu2'}}", "contexts.lab.server: 'gpu2' is not an"),
        ("current: lab", "current: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_file_is_one_sentence(config: Path, text: str, said: str) -> None:
    config.write_text(text)
    with pytest.raises(ConfigError, match=r"config\.yaml") as caught:
        load_config()
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_no_file_is_no_context(config: Path) -> None:
    config.unlink()
    assert load_config() == Config()
    assert resolve_connection(None, None, None, None).server == "http://127.0.0.1:8765"


def test_a_context_may_name_several_brokers_and_its_token_goes_to_them(
    config: Path, tmp_path: Path
) -> None:
    both = f"{LAB},https://gpu2.lab:8765"
    lab = load_config().contexts["lab"].model_dump() | {"server": both}
    save_config(Config(current_context="lab", contexts={"lab": Context(**lab)}))
    chosen = resolve_connection(None, None, None, None)
    assert (chosen.server, chosen.token) == (both, "lab-secret")
