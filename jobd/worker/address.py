"""The address this worker advertises for multi-host jobs, when `--advertise-address` is not given.

The default is the local address of this host's route to the broker: the address the
kernel would put as the source of a connection to it (a UDP socket is "connected", which
sends nothing, and asked for its own name). That is the interface on the network the
broker shares with the workers, which is the one the other members of a gang dial too.
It is chosen here, by the agent, rather than taken from the peer address the broker sees,
because the broker's view is wrong exactly where it matters: behind a proxy or a NAT it
sees the proxy's address, and over a Unix socket none at all. A broker reached only over
a Unix socket (so on this very host) leaves the host name.
"""

from __future__ import annotations

import contextlib
import socket
from urllib.parse import urlsplit

from jobd.api.addresses import check_address

__all__ = ["default_address", "route_source"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def default_address(server: str) -> str | None:
    """The address to advertise for a broker at `server` (one URL, or several
    comma-separated); None when not even the host name is one (the broker then falls
    back to the worker's host name as it was registered)."""
    for url in server.split(","):
        found = route_source(url.strip())
        if found is not None:
            return found
    with contextlib.suppress(ValueError):
        return check_address(socket.gethostname())
    return None


def route_source(url: str) -> str | None:
    """The local address a connection to the broker at `url` leaves from; None for a Unix
    socket, or a broker whose host does not resolve."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    try:
        family, _type, _proto, _name, target = socket.getaddrinfo(
            parts.hostname, port, type=socket.SOCK_DGRAM
        )[0]
    except OSError:
        return None
    with contextlib.closing(socket.socket(family, socket.SOCK_DGRAM)) as probe:
        try:
            probe.connect(target)  # UDP: picks the route and source address, sends nothing
        except OSError:
            return None
        source = str(probe.getsockname()[0])
    try:
        return check_address(source.partition("%")[0])  # an IPv6 scope id is the host's own
    except ValueError:
        return None
