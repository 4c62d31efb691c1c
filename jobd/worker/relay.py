"""The agent's Unix socket: a person on a worker's host reaches the broker through it.

As MUNGE vouches for a uid across a Slurm cluster, the agent vouches for its host's
users: the kernel tells it the caller's uid (`SO_PEERCRED`), it looks the name up on this
host, and relays the request to the broker under its own worker token with `X-Jobd-User:
NAME`. The broker takes a worker's word for users only — never root, never an admin (it
answers 403 saying so) — and acts as that user, with that user's projects and jobs.

What is relayed is kept small, and the worker token never becomes the caller's:

- only the routes a person uses (`USER_ROUTES`: jobs, arrays, logs, events, watch,
  projects, workers read-only, whoami); a worker's own routes (register, heartbeat,
  reports, logs in) are answered 403 here, and the broker would refuse them too, since a
  vouched request is a user's, not the worker's;
- root on this host is refused here (the broker would refuse it too): root uses an
  admin token, or the broker's own socket on the broker's host;
- whatever identity the caller's headers claim (`Authorization`, `X-Jobd-User`) is
  dropped before the agent adds its own; the answer carries only the broker's status,
  body and the few headers a client reads.

Of several brokers (the agent's `--server` list), a request goes to the one that answered
last, to the next when one cannot be reached (a write only when nothing was sent) or
answers 503, and a standby's 307 is followed once to the leader (wire/failover.py says
the same for every client).

Standard library and h11 (which the agent's plain client already uses), plus httpx to
reach the broker, imported at the first relayed request: a root worker offers the socket
by default, and an agent nobody asks through keeps httpx's memory for nothing.
"""

from __future__ import annotations

import asyncio
import json
import pwd
import socket
import struct
from typing import TYPE_CHECKING
from urllib.parse import unquote

import h11

from jobd.logconfig import get_logger
from jobd.wire import routes as r
from jobd.wire.errors import LEADER_HEADER
from jobd.wire.failover import Brokers, connect_timeout
from jobd.wire.plain_http import HOLD_MARGIN_S
from jobd.wire.routes import find_route

if TYPE_CHECKING:
    import httpx

__all__ = ["USER_ROUTES", "VOUCH_HEADER", "Relay"]

log = get_logger()
VOUCH_HEADER = "X-Jobd-User"
USER_ROUTES = frozenset(
    {
        r.APPLY,
        r.CREATE_JOB,
        r.LIST_JOBS,
        r.GET_JOB,
        r.DELETE_JOB,
        r.CANCEL_JOB,
        r.PREEMPT_JOB,
        r.PREEMPT_BLOCKERS,
        r.RESUME_JOB,
        r.READ_LOGS,
        r.CREATE_ARRAY,
        r.LIST_ARRAYS,
        r.GET_ARRAY,
        r.CANCEL_ARRAY,
        r.DELETE_ARRAY,
        r.LIST_WORKERS,
        r.GET_WORKER,
        r.WATCH,
        r.LIST_EVENTS,
        r.LIST_PROJECTS,
        r.GET_PROJECT,
        r.WHOAMI,
    }
)
_DROPPED = frozenset(
    {b"authorization", b"x-jobd-user", b"host", b"connection", b"keep-alive"}
    | {b"content-length", b"transfer-encoding", b"upgrade", b"te", b"trailer"}
)
_PASSED_BACK = ("content-type", "x-jobd-offset", "x-jobd-done", "allow")
_HOLD_S = 300.0 + HOLD_MARGIN_S  # the longest a broker holds a watch or logs -f
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_HEAD = 64 * 1024


class Relay:
    """Relays one host's users' requests to the broker at `server` (or the brokers, comma-
    separated: their http(s):// ones), vouching for each."""

    def __init__(self, server: str, token: str | None, worker: str) -> None:
        self.server, self.worker = server, worker
        tcp = [url for url in server.split(",") if not url.strip().startswith("unix:")]
        self.brokers = Brokers(",".join(tcp))
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            opening = connect_timeout(self.server, 15.0)  # of several brokers: 3 s each
            self._client = httpx.AsyncClient(
                headers=self._headers, timeout=httpx.Timeout(15.0, read=_HOLD_S, connect=opening)
            )
        return self._client

    async def serve(self, sock: socket.socket) -> None:
        """Serve the bound socket `sock` until cancelled."""
        server = await asyncio.start_unix_server(self._connection, sock=sock)
        log.info("relay_listening", socket=str(sock.getsockname()), worker=self.worker)
        try:
            async with server:
                await server.serve_forever()
        finally:
            if self._client is not None:
                await self._client.aclose()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = _peer_uid(writer)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        try:
            while True:
                asked = await _read_request(conn, reader)
                if asked is None:
                    break
                status, headers, body = await self._answer(uid, *asked)
                headers.append((b"content-length", str(len(body)).encode()))
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=body)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, UnicodeError, asyncio.IncompleteReadError):
            pass  # a caller that hung up or spoke no HTTP (or no ASCII): nothing to answer
        finally:
            writer.close()

    async def _answer(self, uid: int | None, request: h11.Request, body: bytes) -> Answer:
        """The broker's answer to the request, or the relay's refusal of it."""
        refused = _refusal(uid, request)
        if refused is not None:
            return refused
        user = _user_name(uid)
        if user is None:
            return _json(403, f"uid {uid} has no user name on worker {self.worker}'s host")
        headers = [(k, v) for k, v in request.headers if k.lower() not in _DROPPED]
        headers.append((VOUCH_HEADER.encode(), user.encode()))
        http = self._http()
        import httpx  # loaded by _http: a dict lookup

        try:
            answer = await self._relayed(http, request, headers, body)
        except httpx.TransportError as exc:
            said = f"worker {self.worker} cannot reach the broker at {self.server} ({exc})"
            return _json(502, said)
        back = [
            (k.encode(), answer.headers[k].encode()) for k in _PASSED_BACK if k in answer.headers
        ]
        return answer.status_code, back, answer.content

    async def _relayed(
        self,
        http: httpx.AsyncClient,
        request: h11.Request,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> httpx.Response:
        """The answer of the first broker that takes the request (no 503), a 307 followed
        once to the leader it names; the last 503, or the last TransportError, when none
        did. A write cut off after it went out is not sent again: it may have been applied."""
        import httpx  # loaded by _http: a dict lookup

        brokers = self.brokers
        method, target = request.method.decode(), request.target.decode("ascii")
        answer: httpx.Response | None = None
        failure: Exception | None = None
        for url in brokers.order():
            try:
                answer = await http.request(method, url + target, headers=headers, content=body)
                if answer.status_code == 307 and "location" in answer.headers:
                    moved_to = answer.headers.get(LEADER_HEADER, url).rstrip("/")
                    location = answer.headers["location"]
                    answer = await http.request(method, location, headers=headers, content=body)
                    url = moved_to
            except httpx.TransportError as exc:
                unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if not unsent and method != "GET":
                    raise
                brokers.failed(url)
                failure = exc
                continue
            if answer.status_code != 503:
                brokers.answered(url)
                return answer
            brokers.failed(url)
        if answer is not None:
            return answer
        assert failure is not None
        raise failure


Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body


def _refusal(uid: int | None, request: h11.Request) -> Answer | None:
    if uid is None:
        return _json(403, "the caller's uid is not known")
    if uid == 0:
        return _json(
            403,
            "root on a worker's host is not vouched for: the broker takes a worker's word "
            "for users only (use an admin token, or the broker's own socket)",
        )
    path = _path(request)
    route = find_route(request.method.decode("ascii", "replace"), path)
    if route is None:
        return _json(404, f"no route {request.method.decode()} {path}")
    if route not in USER_ROUTES:
        return _json(
            403,
            f"{route.method} {route.path} is not relayed: a worker's socket serves a "
            "user's routes only",
        )
    return None


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request, bytes] | None:
    """The next request and its body; None when the caller closed between requests."""
    request: h11.Request | None = None
    chunks: list[bytes] = []
    cap, size = r.SMALL_BODY, 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            conn.receive_data(data)
            if not data and request is None:
                return None
            continue
        if isinstance(event, h11.Request):
            request = event
            cap = r.body_cap(event.method.decode("ascii", "replace"), _path(event))
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
            size += len(event.data)
            if size > cap:  # the broker would refuse it (413): not read on, not relayed
                raise h11.RemoteProtocolError("body over its route's cap")
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, b"".join(chunks)
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _path(request: h11.Request) -> str:
    return unquote(request.target.decode("ascii", "replace").partition("?")[0])


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    _pid, uid, _gid = _CREDENTIALS.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
    )
    return int(uid)


def _user_name(uid: int | None) -> str | None:
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _json(status: int, detail: str) -> Answer:
    body = json.dumps({"detail": detail}).encode()
    return status, [(b"content-type", b"application/json")], body
