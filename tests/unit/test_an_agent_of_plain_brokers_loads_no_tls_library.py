"""An agent whose brokers are all http:// loads no TLS library (daemon/lazy_ssl.py): ssl
is marked absent while asyncio is imported, and a stand-in loads the real module at the
first use of one of its names. Each check runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

_PLAIN_ROUND_TRIP = """
from jobd.daemon import lazy_ssl
lazy_ssl.defer()
import anyio, anyio.streams.tls

async def main():
    async def answer(stream):
        async with stream:
            await stream.send(await stream.receive())
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, answer)
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"ping")
            assert await stream.receive() == b"ping"
        tg.cancel_scope.cancel()

anyio.run(main)
print("before", lazy_ssl.loaded())
import ssl
context = ssl.create_default_context()
assert isinstance(context, ssl.SSLContext) and type(context).__module__ == "ssl"
assert anyio.streams.tls.ssl.MemoryBIO is ssl.MemoryBIO
print("after", lazy_ssl.loaded())
"""


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_plain_tcp_runs_on_anyio_without_ssl_and_ssl_still_loads_when_used() -> None:
    assert _run(_PLAIN_ROUND_TRIP) == ["before", "False", "after", "True"]


def test_a_process_that_has_loaded_ssl_keeps_it() -> None:
    code = "import ssl\nfrom jobd.daemon import lazy_ssl\nlazy_ssl.defer()\n"
    code += "import sys; print(sys.modules['ssl'] is ssl, lazy_ssl.loaded())"
    assert _run(code) == ["True", "True"]


def test_a_context_made_first_through_the_placeholder_is_the_real_one() -> None:
    code = (
        "from jobd.daemon import lazy_ssl\nlazy_ssl.defer()\nimport asyncio, ssl\n"
        "context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n"
        "print(type(context).__module__, isinstance(context, ssl.SSLContext), lazy_ssl.loaded())"
    )
    assert _run(code) == ["ssl", "True", "True"]
