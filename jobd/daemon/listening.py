"""The broker's listening socket, bound before anything else is opened.

`jobd dev` and `jobd broker` bind their port first and hand the socket to uvicorn: a
second jobd on a taken port says so in one sentence and exits before it has opened the
store (or made a token, or started a worker) that the first one is using.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["ListenError", "bind_listener"]


class ListenError(OSError):
    """The address cannot be listened on; the message is one sentence saying why."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening (uvicorn listens on it)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    # As uvicorn binds: a port left in TIME_WAIT by a jobd that just stopped is free,
    # one a live process listens on is not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ListenError(_why(exc, host, port)) from None
    return sock


def _why(exc: OSError, host: str, port: int) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is taken: is another jobd running? Stop it, or start "
            "this one with --port N (JOBD_PORT)"
        )
    if exc.errno == errno.EACCES:
        return f"port {port} on {host} needs privileges this user lacks: use a port above 1023"
    return f"cannot listen on {host}:{port}: {exc.strerror}"
