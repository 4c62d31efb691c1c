"""Contexts, as kubeconfig has them: named brokers a user switches between by name.

`~/.config/jobd/config.yaml` (under `$XDG_CONFIG_HOME` when set; `JOBD_CONFIG` names another
file) holds contexts, each a broker's URL, the file its token is in and, optionally, the
project `job submit` and `job get` use by default; `current_context` names the one in use.
The file holds token *file paths*, never tokens, so it can be shown and shared.

Each setting is resolved on its own, first found wins: its flag, its environment variable,
the context (`--context`, else `JOBD_CONTEXT`, else `current_context`), the default. A
context's token file is only read for the context's own server: a token never goes to a
broker it was not made for. The `job config` verbs that edit this file are in config_verbs.py.
"""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jobd.cli.credentials import TokenFileError, read_token_file
from jobd.discovery import DEFAULT_SERVER, config_path, default_token, local_socket

__all__ = [
    "Config",
    "ConfigError",
    "Connection",
    "Context",
    "config_path",
    "load_config",
    "resolve_connection",
    "save_config",
]


class ConfigError(Exception):
    """The config file, or a context named, cannot be used; the message says why."""


class Context(BaseModel):
    """One broker (or several that fail over): where it is, where its token is, the
    project to default to."""

    model_config = ConfigDict(extra="forbid")

    server: str | None = None
    token_file: str | None = None
    project: str | None = None

    @field_validator("server")
    @classmethod
    def _is_url(cls, value: str | None) -> str | None:
        """One broker's URL, or several comma-separated (failed over between)."""
        for url in [] if value is None else value.split(","):
            if not url.strip().startswith(("http://", "https://", "unix:///")):
                raise ValueError(f"{url!r} is not an http://, https:// or unix:///PATH URL")
        return value


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_context: str | None = None
    contexts: dict[str, Context] = Field(default_factory=dict)

    def context(self, name: str) -> Context:
        """The context `name`; ConfigError naming the ones there are when it is not one."""
        if name not in self.contexts:
            known = ", ".join(sorted(self.contexts)) or "none yet: job config set-context"
            raise ConfigError(f"no context {name!r} in {config_path()} (contexts: {known})")
        return self.contexts[name]


def load_config() -> Config:
    """The config file's contexts; an empty Config when there is no file."""
    from ruamel.yaml import YAML  # here: most runs of `job` have no config file to parse
    from ruamel.yaml.error import YAMLError

    path = config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = YAML(typ="safe", pure=True).load(text)
        return Config.model_validate(data or {})
    except YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {_first_line(str(exc))}") from None
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_first_problem(exc)}") from None


def save_config(config: Config) -> Path:
    """Write the file whole (a temp file renamed over it), mode 0600 as kubeconfig's."""
    from ruamel.yaml import YAML

    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    YAML(typ="safe", pure=True).dump(config.model_dump(exclude_none=True), buffer)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config.", suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        out.write(buffer.getvalue())
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class Connection:
    """Where `job` connects and how it authenticates, once every source is weighed."""

    server: str
    token: str | None
    project: str | None = None  # the context's default project, if it has one


def resolve_connection(
    server: str | None, token: str | None, token_file: Path | None, context_name: str | None
) -> Connection:
    """Flags and environment (already merged by click: `server`, `token`, `token_file`) over
    the context, over the defaults. Raises ConfigError for a context or token file unusable."""
    context = _chosen_context(context_name)
    configured = token is not None or token_file is not None or bool(context.token_file)
    chosen_server = server or context.server or local_socket(configured) or DEFAULT_SERVER
    if token_file is not None:  # wins over --token, as it does for `jobd worker`
        token = _token_from(token_file)
    if token is None and context.token_file and chosen_server == context.server:
        token = _token_from(Path(context.token_file).expanduser())
    return Connection(chosen_server, token or default_token(chosen_server), context.project)


def _chosen_context(name: str | None) -> Context:
    config = load_config()
    name = name or config.current_context
    return config.context(name) if name else Context()


def _token_from(path: Path) -> str:
    try:
        return read_token_file(path)
    except TokenFileError as exc:
        raise ConfigError(str(exc)) from None


def _first_line(text: str) -> str:
    return " ".join(text.split())


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "the file"
    return f"{where}: {error['msg'].removeprefix('Value error, ')}"
