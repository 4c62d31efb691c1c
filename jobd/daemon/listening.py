"""The broker's listening sockets, bound before anything else is opened.

`jobd dev` and `jobd broker` bind their port first and hand the socket to uvicorn: a
second jobd on a taken port says so in one sentence and exits before it has opened the
store (or made a token, or started a worker) that the first one is using.

The Unix socket (`--socket`) is bound the same way, beside it. Its file is made 0666 in
a directory made 0755 when missing, so every local user can connect: the broker knows
each caller from the kernel (SO_PEERCRED), so reaching the socket grants nothing by
itself. A socket file left by a broker that died is replaced; one a live broker answers
on is not.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import weakref
from pathlib import Path

import click

__all__ = [
    "MAX_SOCKET_PATH",
    "ListenError",
    "bind_listener",
    "bind_unix_listener",
    "unix_listener_or_none",
    "unlink_socket",
]

MAX_SOCKET_PATH = 107  # bytes of sun_path, less its NUL (Linux)
# The file each bound socket made (device, inode): a socket's own fstat is sockfs's.
_FILES: weakref.WeakKeyDictionary[socket.socket, tuple[int, int]] = weakref.WeakKeyDictionary()


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


def bind_unix_listener(path: Path, public_dir: bool = True) -> socket.socket:
    """A Unix stream socket bound at `path`, not yet listening. When `public_dir`, its
    directory (made when missing) is 0755 and the socket 0666: every local user may
    connect. Else both stay private (0700, 0600): in `jobd dev`'s data directory only its
    own user reaches the socket anyway, and nothing there is wider than its owner's."""
    where = os.fsencode(path)
    if len(where) > MAX_SOCKET_PATH:
        raise ListenError(
            f"cannot listen on {path}: a Unix socket's path takes at most {MAX_SOCKET_PATH} "
            "bytes; give a shorter --socket (JOBD_SOCKET)"
        )
    _make_directory(path.parent, public_dir)
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(where)
        os.chmod(path, 0o666 if public_dir else 0o600)
        made = os.stat(path)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {path}: {exc.strerror}") from None
    _FILES[sock] = (made.st_dev, made.st_ino)
    return sock


def unix_listener_or_none(
    path: Path, given: bool, what: str, public_dir: bool = True
) -> socket.socket | None:
    """`bind_unix_listener`, for the broker's socket and the worker's relay alike: one that
    cannot be had ends jobd (exit 1) when the user named it (`given`), and is said on
    stderr (`no <what>: ...`) and done without when it was the default."""
    try:
        return bind_unix_listener(path, public_dir)
    except ListenError as exc:
        if given:
            click.echo(f"jobd: {exc}", err=True)
            raise SystemExit(1) from None
        click.echo(f"jobd: no {what}: {exc}", err=True)
        return None


def unlink_socket(sock: socket.socket, path: Path) -> None:
    """Remove the socket file bound by `sock`, unless another broker's replaced it since."""
    try:
        found = os.stat(path)
    except OSError:  # gone already: nothing to remove
        return
    if _FILES.get(sock) == (found.st_dev, found.st_ino):
        os.unlink(path)


def _make_directory(directory: Path, public: bool) -> None:
    if directory.is_dir():
        return
    try:
        directory.mkdir(parents=True)
        if public:
            os.chmod(directory, 0o755)  # reachable by everyone; only the socket is in it
    except OSError as exc:
        raise ListenError(f"cannot make {directory} for the socket: {exc.strerror}") from None


def _clear_stale(path: Path) -> None:
    """Remove a socket file nobody answers on; refuse a live one or a file of another kind."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ListenError(f"cannot listen on {path}: a file that is no socket is there")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(os.fsencode(path))
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)  # left by a broker that is gone
        return
    except OSError as exc:
        raise ListenError(f"cannot listen on {path}: {exc.strerror}") from None
    finally:
        probe.close()
    raise ListenError(
        f"socket {path} is in use: is another jobd running? Stop it, or start this one "
        "with --socket PATH (JOBD_SOCKET)"
    )
