"""`jobd broker install` and `jobd worker install`: a systemd unit for the daemon, from the
settings given on the command line.

Each takes every setting its daemon takes (the same declarations, settings.py, checked as
the daemon checks them) and writes each one given on the command line as an
`Environment=JOBD_...=` line, its environment variable: the unit reads as the settings
table of the docs, and `systemctl edit` overrides one line. Only what the command line
says is written; the environment of the shell that installs is not the service's. A
relative path is made absolute (a service starts in `/`).

Secrets never go into a unit (systemd keeps units world-readable): `--token` is refused
(the worker takes `--token-file`, whose path is written; the broker makes its admin token
in its data dir), and so is a `--db` URL holding a password; either may go in a file of
mode 0600 that `--env-file` names (`EnvironmentFile=`).

Both units restart on failure. The worker's is `KillMode=process`: stopping or restarting
the agent signals the agent alone, and every job's supervisor (worker/shim) runs on, to
be re-adopted by the next agent, whether or not jobs run in scopes of their own.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import urlsplit

import click
from click.core import ParameterSource

from jobd.api.sizes import format_size
from jobd.daemon.settings import (
    AgentConnection,
    BrokerOptions,
    OutputOptions,
    WorkerOptions,
    environment_variables,
    options,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["UnitSpec", "install_command", "render_unit", "setting_lines"]

F = TypeVar("F", bound=Callable[..., Any])

_SETTINGS: dict[str, tuple[type[DataclassInstance], ...]] = {
    "broker": (BrokerOptions, OutputOptions),
    "worker": (AgentConnection, WorkerOptions, OutputOptions),
}
_DESCRIPTIONS = {
    "broker": "jobd broker (control plane)",
    "worker": "jobd worker agent (runs the jobs bound to this host)",
}


@dataclasses.dataclass(frozen=True)
class UnitSpec:
    """What a unit says beside the settings."""

    daemon: str  # broker | worker
    jobd: str  # the jobd program ExecStart runs
    user_unit: bool
    settings: list[tuple[str, str]]  # (environment variable, value)
    env_file: Path | None = None
    run_as: str | None = None
    after: tuple[str, ...] = ()


def install_options(f: F) -> F:
    """What `install` takes beside the daemon's settings."""
    for decorate in reversed(
        [
            click.option(
                "--user",
                "user_unit",
                is_flag=True,
                help="A user unit (~/.config/systemd/user), run by your user manager; "
                "else a system unit (/etc/systemd/system).",
            ),
            click.option(
                "--output",
                type=click.Path(file_okay=False, path_type=Path),
                help="Write the unit into this directory instead.",
            ),
            click.option("--dry-run", is_flag=True, help="Print the unit; write nothing."),
            click.option(
                "--unit-name",
                metavar="NAME",
                help="The unit's name, without .service. [default: jobd-broker, jobd-worker]",
            ),
            click.option(
                "--run-as",
                metavar="USER",
                help="System units: run the daemon as this user (User=). [default: root]",
            ),
            click.option(
                "--env-file",
                type=click.Path(dir_okay=False, path_type=Path),
                help="An environment file of mode 0600 the unit reads (EnvironmentFile=): "
                "for secrets such as JOBD_TOKEN or a JOBD_DB with a password.",
            ),
            click.option("--force", is_flag=True, help="Replace a unit file already there."),
        ]
    ):
        f = decorate(f)
    return f


def install_command(daemon: str) -> click.Command:
    """`jobd <daemon> install`, taking every setting of the daemon."""

    @click.command(
        "install",
        help=f"Write a systemd unit that runs `jobd {daemon}` with the settings given here, "
        "and say how to enable it. Settings become Environment= lines; secrets are refused "
        "(use --token-file or --env-file).",
    )
    @install_options
    @options(*_SETTINGS[daemon])
    @click.pass_context
    def install(ctx: click.Context, /, **given: Any) -> None:
        spec = UnitSpec(
            daemon=daemon,
            jobd=jobd_program(),
            user_unit=given["user_unit"],
            settings=setting_lines(daemon, given, _from_command_line(ctx)),
            env_file=_absolute(given["env_file"]),
            run_as=_run_as(given["run_as"], given["user_unit"]),
            after=_after(given.get("db")),
        )
        name = given["unit_name"] or f"jobd-{daemon}"
        _warn_about_token_file(given.get("token_file"))
        if daemon == "broker" and not spec.user_unit and spec.run_as is None:
            click.echo(
                "note: the broker will run as root; --run-as USER gives it its own", err=True
            )
        text = render_unit(spec)
        if given["dry_run"]:
            click.echo(text, nl=False)
            return
        where = given["output"] or unit_dir(given["user_unit"])
        path = _write(_absolute(where) / f"{name}.service", text, given["force"])
        click.echo(f"wrote {path}", err=True)
        _say_how_to_enable(name, given["user_unit"], given["output"] is not None)

    return install


# -- the settings ----------------------------------------------------------------------------


def _from_command_line(ctx: click.Context) -> set[str]:
    return {
        name for name in ctx.params if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    }


def setting_lines(daemon: str, given: Mapping[str, Any], named: set[str]) -> list[tuple[str, str]]:
    """(variable, value) for each setting of the daemon the command line gave, in the
    order the settings are declared; refuses what would put a secret in the unit."""
    lines = []
    for name, env in environment_variables(*_SETTINGS[daemon]).items():
        if name not in named or given.get(name) is None:
            continue
        _refuse_secret(name, given[name])
        lines.append((env, _text(given[name])))
    return lines


def _refuse_secret(name: str, value: Any) -> None:
    if name == "token":
        raise click.UsageError(
            "--token would be written into the unit, which every local user can read: "
            "give --token-file (mode 0600), or JOBD_TOKEN in an --env-file"
        )
    if name == "db" and urlsplit(str(value)).password:
        raise click.UsageError(
            "--db holds a password, which the unit would show every local user: put "
            "JOBD_DB in an --env-file (mode 0600), or the password in ~/.pgpass"
        )


def _text(value: Any) -> str:
    """A setting's value as its environment variable would give it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, Path):
        return str(_absolute(value))
    if isinstance(value, dict):  # --gpus: index -> memory (None: not said)
        gpus = (f"{i}:{format_size(m)}" if m else str(i) for i, m in value.items())
        return ",".join(gpus) or "none"
    return str(value)


@overload
def _absolute(path: Path) -> Path: ...
@overload
def _absolute(path: None) -> None: ...
def _absolute(path: Path | None) -> Path | None:
    return None if path is None else Path(os.path.abspath(path.expanduser()))


def _run_as(user: str | None, user_unit: bool) -> str | None:
    if user is not None and user_unit:
        raise click.UsageError("--run-as is for system units: a user unit runs as its user")
    return user


def _after(db: str | None) -> tuple[str, ...]:
    """Start after a PostgreSQL of this host, where there is one (harmless where not)."""
    return ("postgresql.service",) if db is not None and db.startswith("postgres") else ()


def _warn_about_token_file(path: Path | None) -> None:
    if path is not None and not path.expanduser().exists():
        click.echo(f"warning: {path} does not exist yet: the worker needs it to start", err=True)


# -- the unit --------------------------------------------------------------------------------


def jobd_program() -> str:
    """This jobd's program: beside the running interpreter (a virtualenv's), else on PATH."""
    beside = Path(sys.executable).parent / "jobd"
    if beside.exists():
        return str(beside)
    found = shutil.which("jobd")
    if found is None:
        raise click.ClickException("no jobd program found to run (beside Python, or on PATH)")
    return os.path.abspath(found)


def render_unit(spec: UnitSpec) -> str:
    """The unit file's text."""
    return "".join(f"{line}\n" for line in _unit_lines(spec))


def _unit_lines(spec: UnitSpec) -> Iterator[str]:
    yield f"# Written by `jobd {spec.daemon} install`. Install again to change a setting, or"
    yield "# override one with `systemctl edit`; each setting is as docs/operations.md says."
    yield "[Unit]"
    yield f"Description={_DESCRIPTIONS[spec.daemon]}"
    yield f"After={' '.join(['network-online.target', *spec.after])}"
    yield "Wants=network-online.target"
    yield ""
    yield "[Service]"
    yield "Type=simple"
    if spec.run_as is not None:
        yield f"User={_quoted(spec.run_as)}"
    yield f"ExecStart={_quoted(spec.jobd, executable=True)} {spec.daemon}"
    for variable, value in spec.settings:
        yield f"Environment={_quoted(f'{variable}={value}')}"
    if spec.env_file is not None:
        yield f"EnvironmentFile={_quoted(str(spec.env_file))}"
    yield "Restart=on-failure"
    yield "RestartSec=2"
    if spec.daemon == "worker":
        yield "# The agent alone: a restart leaves every job's supervisor running (re-adopted)."
        yield "KillMode=process"
    yield ""
    yield "[Install]"
    yield f"WantedBy={'default.target' if spec.user_unit else 'multi-user.target'}"


def _quoted(text: str, *, executable: bool = False) -> str:
    """`text` as one word of a unit file: `%` specifiers (and `$` in ExecStart) kept
    literal, quoted where it holds a space, quote or backslash; no line breaks."""
    if any(c in text for c in "\n\r\0"):
        raise click.UsageError(f"{text!r}: a unit file cannot hold a line break")
    text = text.replace("%", "%%")
    if executable:
        text = text.replace("$", "$$")
    if any(c in text for c in " \t\"\\'"):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


# -- writing it ------------------------------------------------------------------------------


def unit_dir(user_unit: bool) -> Path:
    if not user_unit:
        return Path("/etc/systemd/system")
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user"


def _write(path: Path, text: str, force: bool) -> Path:
    if path.exists() and not force and path.read_text() != text:
        raise click.ClickException(f"{path} exists and differs: --force replaces it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except PermissionError:
        raise click.ClickException(
            f"cannot write {path}: run as root, or give --user or --output DIR"
        ) from None
    path.chmod(0o644)  # systemd reads units as any user; nothing secret is in one
    return path


def _say_how_to_enable(name: str, user_unit: bool, elsewhere: bool) -> None:
    systemctl = "systemctl --user" if user_unit else "systemctl"
    if elsewhere:
        target = "~/.config/systemd/user/" if user_unit else "/etc/systemd/system/"
        click.echo(f"copy it into {target}, then:", err=True)
    click.echo(f"{systemctl} daemon-reload && {systemctl} enable --now {name}", err=True)
    if user_unit:
        click.echo(
            'loginctl enable-linger "$USER"   # keeps it (and its jobs) up without a login',
            err=True,
        )
