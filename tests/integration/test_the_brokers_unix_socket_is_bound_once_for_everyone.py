"""The broker's Unix socket: 0666 in a 0755 directory it makes, never taken from a live
broker, a dead one's file replaced, removed at stop, and the
caller's credentials read from the kernel per connection. An occupied socket is refused
alike for the broker and the worker's relay: the end of jobd when --socket named it, a
line and no socket when it was the default."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.broker.http.connections import Peer, peer_of
from jobd.daemon.broker_process import listen_unix
from jobd.daemon.listening import ListenError, bind_unix_listener, unlink_socket
from jobd.daemon.worker_process import relay_socket


@pytest.fixture
def where() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="jobd-sock-"))  # short: sun_path holds 107 bytes
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_the_socket_is_open_to_every_local_user(where: Path) -> None:
    old = os.umask(0o077)  # as the daemons run
    try:
        sock = bind_unix_listener(where / "run" / "jobd.sock")
    finally:
        os.umask(old)
    with sock:
        assert stat.S_IMODE((where / "run").stat().st_mode) == 0o755
        assert stat.S_IMODE((where / "run" / "jobd.sock").stat().st_mode) == 0o666


def test_an_occupied_socket_is_refused_alike_by_the_broker_and_the_relay(
    where: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = where / "jobd.sock"
    in_use = f"jobd: socket {path} is in use"
    with bind_unix_listener(path) as live:
        live.listen()
        # The default (the relay's is root's /run/jobd, left alone here): said, done without.
        assert listen_unix(path, False, where / "data") is None
        assert capsys.readouterr().err.startswith(f"jobd: no Unix socket: {in_use[6:]}")
        # Named with --socket: the end of jobd, in one line, for either daemon.
        for bind in (lambda: listen_unix(path, True, where), lambda: relay_socket(str(path), "")):
            with pytest.raises(SystemExit) as ended:
                bind()
            assert ended.value.code == 1
            assert capsys.readouterr().err.startswith(in_use)


def test_a_private_directory_stays_private(where: Path) -> None:
    old = os.umask(0o077)
    try:
        with bind_unix_listener(where / "data" / "jobd.sock", public_dir=False):
            assert stat.S_IMODE((where / "data").stat().st_mode) == 0o700
    finally:
        os.umask(old)


def test_a_live_brokers_socket_is_refused_and_a_dead_ones_replaced(where: Path) -> None:
    path = where / "jobd.sock"
    first = bind_unix_listener(path)
    first.listen()
    with pytest.raises(ListenError, match="is in use"):
        bind_unix_listener(path)
    first.close()  # died without removing its file
    assert path.exists()
    second = bind_unix_listener(path)
    unlink_socket(second, path)
    assert not path.exists()
    second.close()


def test_what_is_no_socket_or_too_long_is_refused(where: Path) -> None:
    (where / "file").write_text("")
    with pytest.raises(ListenError, match="no socket"):
        bind_unix_listener(where / "file")
    with pytest.raises(ListenError, match="at most 107 bytes"):
        bind_unix_listener(where / ("x" * 120))


def test_the_peer_is_known_from_the_kernel(where: Path) -> None:
    path = where / "jobd.sock"
    found: list[Peer | None] = []

    class Recording(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            found.append(peer_of(transport))
            transport.close()

    async def connect_once() -> None:
        sock = bind_unix_listener(path)
        server = await asyncio.get_running_loop().create_server(Recording, sock=sock)
        async with server:
            _, writer = await asyncio.open_unix_connection(str(path))
            while not found:
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(connect_once())
    assert found == [Peer(os.getpid(), os.getuid(), os.getgid())]
