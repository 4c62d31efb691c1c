"""`job top`: a live full-screen view of workers and their GPUs, running jobs, the queue
and recent preemptions, as `htop` or `k9s` show theirs.

Each refresh (every `--interval`, 2 s by default) lists what a frame shows: the workers
(with their GPUs' newest NVML readings, which the broker keeps in memory, not the store:
no watch would carry them), the jobs bound to workers, the queue (the first
`QUEUE_LIMIT` by id, shown in the scheduler's order) and the preemptions since the last
refresh. Lists rather than the watch: a frame is the cluster at one moment, four small
requests, and a broker that was away is simply asked again. top_view.py draws a frame
from them; here are the loop, the keys and the terminal. rich is imported only when the
verb runs, so `job`'s other verbs start without it.

Keys (`press`): q quits (Ctrl-C too), p types a project to show (Enter applies, empty
means all, Esc keeps the current one), ↑/↓ or k/j select a job, l or Enter opens its
output in the pager (`$PAGER`, else `less +G`). With stdout or stdin not a terminal, one
frame is printed with nothing cut, as `top -b -n 1` does.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import termios
import time
import tty
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from jobd.api.vocabulary import BOUND_PHASES, Phase
from jobd.cli.options import client, output_option, print_documents
from jobd.wire.errors import ApiError, BrokerUnreachable

if TYPE_CHECKING:
    from jobd.cli.broker_client import JobdClient
    from jobd.cli.top_view import Screen, Snapshot

__all__ = ["VERBS", "Feed", "keys_of", "press"]

QUEUE_LIMIT = 200  # a refresh lists no more: ~9 ms of the broker's CPU (docs/performance.md)
PREEMPTIONS = 16  # the newest kept for the frame
LOG_LINES = 2000  # the end of a job's output the pager is given
_PIPE_WIDTH = 200  # as the other verbs print to a pipe
_BOUND = sorted(p.value for p in BOUND_PHASES)

Document = Mapping[str, Any]


@click.command()
@click.option("-p", "--project", metavar="NAME", help="Only this project's jobs (key p).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5, max=60),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Time between refreshes.",
)
@output_option("text")
def top(project: str | None, interval: float, output: str) -> None:
    """Show workers and their GPUs, running jobs, the queue and preemptions, live.

    Keys: q quit, p choose a project (empty: all), ↑/↓ (k/j) select a job, l or Enter
    read its output in the pager. Not on a terminal: print one frame and exit. With -o
    json or yaml: print what one frame shows, as documents, and exit.
    """
    settings = click.get_current_context().find_root().obj
    with client() as broker:
        feed = Feed(broker)
        if output != "text":
            print_documents([_documents(feed.refresh(project))], output, single=True)
        elif sys.stdout.isatty() and sys.stdin.isatty():
            _live(feed, settings.server, project, interval)
        else:
            _once(feed, settings.server, project)


# -- what a refresh asks ---------------------------------------------------------------------


class Feed:
    """The broker's answers for each frame; preemptions are read once, then only new ones."""

    def __init__(self, broker: JobdClient) -> None:
        self.broker = broker
        self.preemptions: deque[Document] = deque(maxlen=PREEMPTIONS)
        self._after: int | None = None
        self._last: Snapshot | None = None
        self._projects: dict[int, str] = {}  # a preempted job's project, once asked

    def refresh(self, project: str | None) -> Snapshot:
        """A fresh snapshot; after the first, a failure keeps the last one, saying why."""
        try:
            self._last = self._read(project)
        except (ApiError, BrokerUnreachable) as exc:
            if self._last is None:
                raise
            self._last.error = exc.message
        return self._last

    def _read(self, project: str | None) -> Snapshot:
        from jobd.cli.top_view import Snapshot

        workers = self.broker.list_workers()
        bound = self.broker.list_jobs(phase=_BOUND).items
        pending = self.broker.list_jobs(
            project=project, phase=[Phase.PENDING.value], limit=QUEUE_LIMIT
        )
        self._read_preemptions()
        running = [j for j in bound if project is None or _project(j) == project]
        return Snapshot(
            workers=workers,
            running=sorted(running, key=_id),
            holders=bound,
            queued=sorted(pending.items, key=_queue_order),
            queued_total=len(pending.items),
            queued_more=len(pending.items) >= QUEUE_LIMIT,
            preemptions=[e for e in self.preemptions if self._shown(e, project)],
        )

    def _shown(self, event: Document, project: str | None) -> bool:
        """Whether a preemption is of the project shown: its job's, asked once each."""
        if project is None:
            return True
        job_id = event.get("job")
        if not isinstance(job_id, int):
            return False
        if job_id not in self._projects:
            try:
                self._projects[job_id] = _project(self.broker.get_job(job_id))
            except ApiError:  # gone (retention), or not ours to read: of no project shown
                self._projects[job_id] = ""
        return self._projects[job_id] == project

    def _read_preemptions(self) -> None:
        while True:
            page = self.broker.events(event_type="auto_preempt", after=self._after)
            self.preemptions.extend(page.items)
            if not page.items or page.last is None or page.last == self._after:
                return
            self._after = page.last


def _documents(snapshot: Snapshot) -> dict[str, Any]:
    """What a frame shows, for scripts: the documents as the broker answered them."""
    return {
        "workers": list(snapshot.workers),
        "running": list(snapshot.running),
        "queued": list(snapshot.queued),
        "queued_more": snapshot.queued_more,
        "preemptions": list(snapshot.preemptions),
    }


def _id(job: Document) -> int:
    return int((job.get("metadata") or {}).get("id", 0))


def _project(job: Document) -> str:
    return str((job.get("metadata") or {}).get("project") or "default")


def _queue_order(job: Document) -> tuple[int, str, int]:
    """The scheduler's: highest priority first, then first queued."""
    status = job.get("status") or {}
    priority = (status.get("effective") or {}).get("priority") or 0
    return -int(priority), str(status.get("queued_at") or ""), _id(job)


# -- keys ------------------------------------------------------------------------------------

_SEQUENCES = {
    "\x1b[A": "up",
    "\x1bOA": "up",
    "\x1b[B": "down",
    "\x1bOB": "down",
    "\r": "enter",
    "\n": "enter",
    "\x7f": "backspace",
    "\b": "backspace",
    "\x1b": "esc",
}


def keys_of(data: str) -> list[str]:
    """The keys in what one read from the terminal gave: names for the special ones; an
    escape sequence of no key here (F5, ...) is none."""
    keys: list[str] = []
    while data:
        known = next((k for k in _SEQUENCES if len(k) > 1 and data.startswith(k)), None)
        if known is not None:
            keys.append(_SEQUENCES[known])
            data = data[len(known) :]
        elif data.startswith(("\x1b[", "\x1bO")) and len(data) > 2:
            end = next((i for i, c in enumerate(data[2:], 2) if c.isalpha() or c == "~"), 2)
            data = data[end + 1 :]
        else:
            keys.append(_SEQUENCES.get(data[0], data[0]))
            data = data[1:]
    return keys


def press(screen: Screen, key: str, jobs: Sequence[int]) -> str | None:
    """Apply a key to the screen; the action it asks of the loop, if any: `quit`,
    `logs` (of `screen.selected`) or `refresh` (the project changed)."""
    screen.notice = None  # said until the next key
    if screen.prompt is not None:
        return _type(screen, key)
    if key in ("q", "Q"):
        return "quit"
    if key == "p":
        screen.prompt = ""
    elif key in ("up", "k", "down", "j"):
        _move(screen, jobs, -1 if key in ("up", "k") else 1)
    elif key in ("l", "enter") and screen.selected is not None:
        return "logs"
    return None


def _type(screen: Screen, key: str) -> str | None:
    assert screen.prompt is not None
    if key == "esc":
        screen.prompt = None
    elif key == "enter":
        screen.project, screen.prompt, screen.selected = screen.prompt.strip() or None, None, None
        return "refresh"
    elif key == "backspace":
        screen.prompt = screen.prompt[:-1]
    elif len(key) == 1 and key.isprintable():
        screen.prompt += key
    return None


def _move(screen: Screen, jobs: Sequence[int], step: int) -> None:
    if not jobs:
        screen.selected = None
        return
    at = jobs.index(screen.selected) + step if screen.selected in jobs else 0
    screen.selected = jobs[max(0, min(at, len(jobs) - 1))]


# -- the terminal ----------------------------------------------------------------------------


def _once(feed: Feed, server: str, project: str | None) -> None:
    from jobd.cli import render
    from jobd.cli.top_view import Screen, frame

    width = shutil.get_terminal_size((_PIPE_WIDTH, 24)).columns
    screen = Screen(width=width, height=100_000, server=server, project=project, live=False)
    sys.stdout.write(render.to_text(frame(feed.refresh(project), screen), width))


def _live(feed: Feed, server: str, project: str | None, interval: float) -> None:
    from rich.console import Console
    from rich.live import Live

    from jobd.cli.top_view import Screen, frame, selectable

    console = Console(highlight=False, emoji=False)
    screen = Screen(server=server, project=project)
    snapshot = feed.refresh(project)
    live = Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False)
    with contextlib.suppress(KeyboardInterrupt), _cbreak(), _resizes() as resized, live:
        due = time.monotonic() + interval
        while True:
            screen.width, screen.height = console.size
            jobs = selectable(snapshot)
            if screen.selected not in jobs:
                screen.selected = jobs[0] if jobs else None
            live.update(frame(snapshot, screen), refresh=True)
            data = _read(max(0.0, due - time.monotonic()), resized)
            if data is None:
                continue  # the terminal changed size: draw again at once
            actions = [press(screen, key, jobs) for key in keys_of(data)]
            if "quit" in actions:
                return
            if "logs" in actions and screen.selected is not None:
                live.stop()
                screen.notice = _page_logs(feed.broker, screen.selected)
                live.start()
            if data == "" or "refresh" in actions:
                snapshot = feed.refresh(screen.project)
                due = time.monotonic() + interval


def _read(timeout: float, resized: int | None = None) -> str | None:
    """What the user typed within `timeout` seconds; "" when nothing, None when the
    terminal was resized meanwhile (a byte on the `resized` pipe)."""
    watched = [sys.stdin.fileno(), *([resized] if resized is not None else [])]
    ready, _, _ = select.select(watched, [], [], timeout)
    if resized is not None and resized in ready:
        os.read(resized, 64)
        return None
    if not ready:
        return ""
    return os.read(sys.stdin.fileno(), 64).decode(errors="replace") or "q"  # EOF: quit


@contextlib.contextmanager
def _resizes() -> Iterator[int]:
    """A pipe that gets a byte when the terminal is resized (SIGWINCH), for `select`."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    previous = signal.signal(signal.SIGWINCH, lambda *_: _nudge(wake_w))
    try:
        yield wake_r
    finally:
        signal.signal(signal.SIGWINCH, previous)
        os.close(wake_r)
        os.close(wake_w)


def _nudge(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):  # already nudged: one byte is enough
        os.write(fd, b"!")


@contextlib.contextmanager
def _cbreak() -> Iterator[None]:
    """Keys one at a time, unechoed; Ctrl-C still interrupts. Restored on the way out."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _page_logs(broker: JobdClient, job_id: int) -> str | None:
    """Show the end of the job's output in the pager; a notice for the footer, if any."""
    try:
        data = broker.read_logs(job_id, tail=LOG_LINES).data
    except (ApiError, BrokerUnreachable) as exc:
        return f"job {job_id}: {exc.message}"
    if not data:
        return f"job {job_id} has printed nothing yet"
    with _cooked():
        _page(data)
    return None


@contextlib.contextmanager
def _cooked() -> Iterator[None]:
    """The terminal as the pager expects it (echo, lines), cbreak again afterwards."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    cooked = list(saved)
    cooked[3] |= termios.ECHO | termios.ICANON
    termios.tcsetattr(fd, termios.TCSADRAIN, cooked)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _page(data: bytes) -> None:
    """Through `$PAGER`, else `less` at the end, else `more`; printed when there is none."""
    command = shlex.split(os.environ.get("PAGER") or "")
    if not command:
        command = ["less", "-R", "+G"] if shutil.which("less") else ["more"]
    try:
        subprocess.run(command, input=data, check=False)
    except OSError:  # no such pager
        sys.stdout.buffer.write(data + b"\n(no pager found: press a key)")
        sys.stdout.flush()
        _read(3600)


VERBS = [top]
