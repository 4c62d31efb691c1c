"""Where a client finds its broker, and the token it offers it (CONTRACT.md §2 and §8).

Plain standard library, so the `job` command can settle `--server` and `--token` before
it knows whether a verb will talk to the broker at all (`jobd.cli.broker_client` re-exports these).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_SERVER",
    "TokenError",
    "config_path",
    "data_dir",
    "default_server",
    "default_sockets",
    "default_token",
    "local_socket",
    "usable_token",
]

DEFAULT_SERVER = "http://127.0.0.1:8765"
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# What a bearer token may hold: printable ASCII, no space (every token jobd makes is so).
_TOKEN_TEXT = re.compile(r"[\x21-\x7e]+")


class TokenError(ValueError):
    """A token no HTTP header can carry; the message says so without showing the token."""


def usable_token(token: str | None, source: str = "--token or JOBD_TOKEN") -> str | None:
    """`token` without the whitespace around it (a newline pasted or echoed in, as a token
    file is read); None when nothing is left. TokenError, naming `source` and never the
    token, when what is left has a character a header cannot carry."""
    token = (token or "").strip()
    if not token:
        return None
    if _TOKEN_TEXT.fullmatch(token) is None:
        raise TokenError(
            f"the token from {source} has a character a token cannot have (a space or a "
            "control character inside it, or a non-ASCII one): set it again from the "
            "line `jobd token create` printed"
        )
    return token


def default_server() -> str:
    """`JOBD_URL`, else the broker `jobd dev` starts on this machine."""
    return os.environ.get("JOBD_URL") or DEFAULT_SERVER


def default_sockets() -> list[Path]:
    """Where a broker on this machine puts its Unix socket by default: root's, then this
    user's own (`$XDG_RUNTIME_DIR/jobd.sock`)."""
    found = [Path("/run/jobd/jobd.sock")]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        found.append(Path(runtime) / "jobd.sock")
    return found


def local_socket(token_configured: bool) -> str | None:
    """The broker's Unix socket to use when no server is configured, as `unix:///PATH`:
    `JOBD_SOCKET`; else, when no token is configured either, a default socket that is
    there (a person on the broker's host needs no token); else None (as before: TCP)."""
    explicit = os.environ.get("JOBD_SOCKET")
    if explicit and explicit != "none":
        return "unix://" + str(Path(explicit).expanduser().absolute())
    if token_configured or explicit == "none":
        return None
    import stat

    for path in default_sockets():
        try:
            if stat.S_ISSOCK(path.stat().st_mode):
                return f"unix://{path}"
        except OSError:
            continue
    return None


def config_path() -> Path:
    """The contexts' file: `JOBD_CONFIG`, else `$XDG_CONFIG_HOME/jobd/config.yaml`, else
    `~/.config/jobd/config.yaml`."""
    explicit = os.environ.get("JOBD_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "jobd" / "config.yaml"


def data_dir() -> Path:
    """`JOBD_DATA_DIR`, else `$XDG_DATA_HOME/jobd`, else `~/.local/share/jobd`."""
    explicit = os.environ.get("JOBD_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "jobd"
    return Path.home() / ".local" / "share" / "jobd"


def default_token(server: str) -> str | None:
    """`JOBD_TOKEN`, else the local broker's `<data dir>/admin.token`, else None.

    The token file belongs to the broker on this machine, so it is only offered to a server
    on this machine: an admin token must never leak to some other host by default (of
    several brokers, comma-separated, every one must be on this machine).
    """
    token = usable_token(os.environ.get("JOBD_TOKEN"), "JOBD_TOKEN")
    if token:
        return token
    # A Unix socket knows its caller by uid: it needs no token, and is never sent one.
    tcp = [one.strip() for one in server.split(",") if one.strip()]
    tcp = [one for one in tcp if not one.startswith("unix:")]
    if not tcp or not all(_is_local(one) for one in tcp):
        return None
    try:
        return (data_dir() / "admin.token").read_text().strip() or None
    except OSError:
        return None


def _is_local(server: str) -> bool:
    import socket  # only without JOBD_TOKEN: its enums cost `job --help` ~10 M instructions

    host = (urlsplit(server).hostname or "").lower()
    if host in _LOOPBACK_NAMES or host == socket.gethostname().lower():
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
