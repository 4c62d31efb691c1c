"""Where a client finds its broker, and the token it offers it (CONTRACT.md §2 and §8).

Plain standard library, so the `job` command can settle `--server` and `--token` before
it knows whether a verb will talk to the broker at all (`jobd.cli.broker_client` re-exports these).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["DEFAULT_SERVER", "config_path", "data_dir", "default_server", "default_token"]

DEFAULT_SERVER = "http://127.0.0.1:8765"
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def default_server() -> str:
    """`JOBD_URL`, else the broker `jobd dev` starts on this machine."""
    return os.environ.get("JOBD_URL") or DEFAULT_SERVER


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
    on this machine: an admin token must never leak to some other host by default.
    """
    token = os.environ.get("JOBD_TOKEN")
    if token:
        return token
    if not _is_local(server):
        return None
    try:
        return (data_dir() / "admin.token").read_text().strip() or None
    except OSError:
        return None


def _is_local(server: str) -> bool:
    host = (urlsplit(server).hostname or "").lower()
    if host in _LOOPBACK_NAMES or host == socket.gethostname().lower():
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
