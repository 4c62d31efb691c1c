"""Workload-side helper for jobd's checkpoint-on-preemption protocol.

A workload imports this module to opt into "path B" preemption: when jobd wants the slot back
it SIGTERMs the job and waits up to ``JOBD_CHECKPOINT_GRACE_S`` seconds before SIGKILL. The
helper turns that SIGTERM into a call to your checkpoint function and then reports the outcome
in the only way the worker can see it, the job's output:

* ``install_preemption_handler(fn)`` reads ``JOBD_CHECKPOINT_GRACE_S`` (60 when absent or not a
  finite, non-negative number) and installs a SIGTERM handler. On SIGTERM it records the
  deadline (arrival time + grace) and calls ``fn(seconds_until_sigkill)``.
  If ``fn`` returns, the handler writes the line ``jobd-checkpoint-complete`` to stdout and
  the process exits 0; the worker sees the line and records a ``checkpoint_complete`` event.
  If ``fn`` raises, the traceback goes to stderr, no sentinel is written and the process
  exits 1.
* ``checkpoint_complete()`` prints that line itself (flushed), for a workload that saves
  its checkpoint some other way than in ``fn`` (a training loop that stops at a step
  boundary, say) and then exits on its own.
* Under ``torchrun`` (and any launcher that sets ``LOCAL_RANK``), a host's processes share
  one output: only the process whose ``LOCAL_RANK`` is unset or ``"0"`` prints the
  sentinel, the handler's and ``checkpoint_complete()``'s alike, so every process may call
  them after saving and each host says it once. A multi-host job's checkpoint is complete
  when every member (host) has said so.
* ``SENTINEL`` is that line's text; ``CHECKPOINT_COMPLETE_TOKEN`` is the same string under the
  name other implementations of the protocol use, so scripts written for them run unchanged.
* ``time_remaining()`` returns the live seconds until SIGKILL once SIGTERM has arrived (never
  below 0), and the full grace before that.
* ``report_progress(step, total=None, **metrics)`` prints one line,
  ``jobd-progress {"step": 120, "total": 4000, "loss": 0.31}``, and flushes stdout. The
  worker reads it into the job's ``status.progress``: the step, the total, ``fraction``,
  ``eta_s`` (from the rate since the first report) and the newest metrics, shown by
  ``job get`` (PROGRESS), ``job wait`` and ``job logs -f`` (a bar on a terminal) and
  ``/metrics``. Call it as often as you like: the worker sends the newest line at most
  once a second. Metrics are numbers, or short strings (status only); at most 32 keys are
  kept, and a value that is neither (NaN, a list, ...) is dropped. Printing the same line
  yourself, from any language, works as well.

The module imports only the standard library, so it costs a workload nothing to import and it
works in any environment that can run the workload.

Usage::

    import os
    from pathlib import Path

    from jobd.client import install_preemption_handler, report_progress

    ckpt_dir = Path(os.environ["JOBD_CHECKPOINT_DIR"])

    def checkpoint(time_remaining: float) -> None:
        save_state(model, optimizer, step, ckpt_dir / "latest.pt")

    install_preemption_handler(checkpoint)
    for step in range(start, total_steps):
        loss = train_step()
        report_progress(step + 1, total_steps, loss=loss)

Notes for the checkpoint function: it runs inside a signal handler on the main thread, between
two bytecodes of whatever the program was doing, so it should save state that is consistent at
any such point (for example a snapshot the training loop replaces in one assignment per step)
and should not print to a stream the interrupted code may be in the middle of writing.
``install_preemption_handler`` must be called from the main thread, as Python requires for
``signal.signal``.
"""

from __future__ import annotations

import json
import math
import operator
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

__all__ = [
    "CHECKPOINT_COMPLETE_TOKEN",
    "PROGRESS_MARKER",
    "SENTINEL",
    "checkpoint_complete",
    "install_preemption_handler",
    "report_progress",
    "time_remaining",
]

SENTINEL = "jobd-checkpoint-complete"
PROGRESS_MARKER = "jobd-progress"
# The name other implementations of this protocol give the same line, so a workload written
# for them (`from ... import CHECKPOINT_COMPLETE_TOKEN`) runs here unchanged.
CHECKPOINT_COMPLETE_TOKEN = SENTINEL

_GRACE_ENV = "JOBD_CHECKPOINT_GRACE_S"
_LOCAL_RANK_ENV = "LOCAL_RANK"  # torchrun's: the process's index on its host
_DEFAULT_GRACE_S = 60.0

_grace_s: float | None = None
_deadline: float | None = None
_checkpoint_fn: Callable[[float], None] | None = None
_handling = False


def install_preemption_handler(fn: Callable[[float], None]) -> None:
    """Call ``fn(seconds_until_sigkill)`` on SIGTERM, then report the outcome and exit."""
    global _grace_s, _checkpoint_fn
    _grace_s = _read_grace()
    _checkpoint_fn = fn
    signal.signal(signal.SIGTERM, _on_sigterm)


def time_remaining() -> float:
    """Seconds until SIGKILL since SIGTERM arrived; the whole grace before that."""
    if _deadline is None:
        return _grace_s if _grace_s is not None else _read_grace()
    return max(0.0, _deadline - time.monotonic())


def checkpoint_complete() -> None:
    """Print the sentinel line (after what stdout holds), where this process speaks for its
    host: ``LOCAL_RANK`` unset or ``"0"``; elsewhere nothing."""
    if not _speaks_for_host():
        return
    sys.stdout.flush()
    _write_all(1, (SENTINEL + "\n").encode())


def _speaks_for_host() -> bool:
    """Whether this process prints its host's sentinel: one per host under torchrun."""
    return os.environ.get(_LOCAL_RANK_ENV, "0").strip() in ("", "0")


def report_progress(step: float, total: float | None = None, **metrics: float | str) -> None:
    """Print ``jobd-progress {json}`` (flushed) for the worker to read into status.progress."""
    said = {"step": step, **({} if total is None else {"total": total}), **metrics}
    line = json.dumps({key: _plain(value) for key, value in said.items()})
    print(f"{PROGRESS_MARKER} {line}", flush=True)


def _plain(value: Any) -> Any:
    """A number JSON can hold: numpy and torch scalars become int or float (a training
    loop should not die of a report), anything else its text."""
    if value is None or isinstance(value, str | int | float):
        return value
    for convert in (operator.index, float):
        try:
            return convert(value)
        except (TypeError, ValueError, OverflowError):
            continue
    return str(value)


def _read_grace() -> float:
    try:
        grace = float(os.environ.get(_GRACE_ENV, ""))
    except ValueError:
        return _DEFAULT_GRACE_S
    if not math.isfinite(grace) or grace < 0:
        return _DEFAULT_GRACE_S
    return grace


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _deadline, _handling
    # A second SIGTERM (the worker and a scope both signalling, an impatient operator) must not
    # restart the checkpoint. A flag rather than SIG_IGN, because SIG_IGN would be inherited by
    # any child process the checkpoint function starts.
    if _handling:
        return
    _handling = True
    arrived = time.monotonic()
    grace = _grace_s if _grace_s is not None else _read_grace()
    _deadline = arrived + grace
    try:
        if _checkpoint_fn is not None:
            _checkpoint_fn(time_remaining())
    except BaseException:
        _finish(2, traceback.format_exc(), exit_code=1)
    _finish(1, SENTINEL + "\n" if _speaks_for_host() else "", exit_code=0)


def _finish(fd: int, text: str, exit_code: int) -> NoReturn:
    # Whatever the interrupted code had buffered goes out first so the sentinel stays last.
    # Flushing may fail ("reentrant call") when the signal landed inside a buffered write; the
    # raw os.write below cannot, which is why the outcome never goes through print().
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            pass
    _write_all(fd, text.encode("utf-8", errors="replace"))
    # os._exit skips atexit and finalizers, which could block or touch the same buffers again.
    os._exit(exit_code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return  # nobody is reading (closed pipe); the exit code still tells the story
        view = view[written:]
