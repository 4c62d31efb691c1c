"""`jobd mcp`'s options and start: who to reach and with which token, then serve on stdio.

The token is found as `job` finds it (--token, JOBD_TOKEN, a local broker's admin.token),
or read from a 0600 file as `jobd worker` reads one (--token-file), so an MCP client's
config need not hold the token itself. The SDK is an optional extra, imported only here,
when the command runs: `jobd --help` and the other programs never load it.
Next stage: `jobd.cli.mcp_server`, the tools.
"""

from __future__ import annotations

from pathlib import Path

import click

from jobd.cli.credentials import TokenFileError, read_token_file

__all__ = ["mcp"]

_NO_SDK = "jobd mcp: the MCP server needs the optional extra: pip install 'jobd[mcp]'"


@click.command()
@click.option(
    "--server",
    envvar="JOBD_URL",
    show_envvar=True,
    help="The broker's URL, or unix:///PATH for its Unix socket; several, comma-separated, "
    "to fail over between brokers. [default: JOBD_SOCKET, "
    "else a local broker's socket when no token is given, else http://127.0.0.1:8765]",
)
@click.option(
    "--token",
    envvar="JOBD_TOKEN",
    show_envvar=True,
    help="Bearer token, with the roles `job` would have. "
    "[default: a local broker's <data-dir>/admin.token]",
)
@click.option(
    "--token-file",
    envvar="JOBD_TOKEN_FILE",
    show_envvar=True,
    type=click.Path(path_type=Path),
    help="Read the token from this file (mode 0600) instead.",
)
def mcp(server: str | None, token: str | None, token_file: Path | None) -> None:
    """Serve MCP on stdio: tools for an LLM agent to submit, watch and stop jobs.

    Wire it into an MCP client as the command `jobd` with the argument `mcp`
    (docs/mcp.md). Needs the optional extra: pip install 'jobd[mcp]'.
    """
    try:
        from jobd.cli.mcp_server import build_server
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "mcp":
            raise
        click.echo(_NO_SDK, err=True)
        raise SystemExit(1) from None
    from jobd.cli.broker_client import DEFAULT_SERVER, JobdClient, default_token
    from jobd.discovery import local_socket

    chosen = _token_from_file(token_file) if token_file else _usable(token)
    server = server or local_socket(chosen is not None) or DEFAULT_SERVER
    with JobdClient(server, chosen or default_token(server)) as broker:
        build_server(broker).run("stdio")


def _usable(token: str | None) -> str | None:
    from jobd.discovery import TokenError, usable_token

    try:
        return usable_token(token)
    except TokenError as exc:
        click.echo(f"jobd mcp: {exc}", err=True)
        raise SystemExit(2) from None


def _token_from_file(path: Path) -> str:
    try:
        return read_token_file(path.expanduser())
    except TokenFileError as exc:
        click.echo(f"jobd mcp: {exc}", err=True)
        raise SystemExit(2) from None
