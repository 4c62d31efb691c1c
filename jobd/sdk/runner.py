"""Runs an `Executor`'s function inside its job: `python -m jobd.sdk.runner`.

The payload (cloudpickle of `{"fn", "calls"}`) is read from `JOBD_EXECUTOR_PAYLOAD_DIR`
(`payload.pkl`, a shared directory) or from the job's environment
(`JOBD_EXECUTOR_PAYLOAD_0`, `_1`, ...: base64 pieces, each under the 128 KiB the kernel
allows one variable). A job array's member runs the call of its `JOBD_ARRAY_INDEX`. The
outcome — `("value", v)` or `("raise", exception, traceback text)` — goes back the same
way: a file `result.pkl` (`result-<index>.pkl` for a member) renamed into place, or
`jobd-executor-result` lines at the end of the job's output, ended by
`jobd-executor-end <count>` so the client reads only the tail. The job exits 0 with a
value, 1 with an exception. Imports the standard library and cloudpickle only.
"""

from __future__ import annotations

import base64
import os
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = [
    "END_MARKER",
    "PAYLOAD_DIR_ENV",
    "PAYLOAD_ENV",
    "RESULT_MARKER",
    "main",
    "result_name",
]

PAYLOAD_DIR_ENV = "JOBD_EXECUTOR_PAYLOAD_DIR"
PAYLOAD_ENV = "JOBD_EXECUTOR_PAYLOAD_"
RESULT_MARKER = "jobd-executor-result"
END_MARKER = "jobd-executor-end"
LINE_BYTES = 3 * 1024  # base64 of this is 4 KiB: short lines for every log reader
# The largest outcome sent through the job's output (the broker keeps the newest bytes of
# a job's output, so this must stay well under `--max-log-bytes`).
OUTPUT_CAP = 16 * 1024 * 1024


def result_name(index: int | None) -> str:
    return "result.pkl" if index is None else f"result-{index}.pkl"


def _payload() -> bytes:
    folder = os.environ.get(PAYLOAD_DIR_ENV)
    if folder:
        return (Path(folder) / "payload.pkl").read_bytes()
    pieces: list[str] = []
    while (piece := os.environ.get(f"{PAYLOAD_ENV}{len(pieces)}")) is not None:
        pieces.append(piece)
    if not pieces:
        raise SystemExit(f"jobd.sdk.runner: neither {PAYLOAD_DIR_ENV} nor {PAYLOAD_ENV}0 is set")
    return base64.b64decode("".join(pieces))


def _index() -> int | None:
    index = os.environ.get("JOBD_ARRAY_INDEX")
    return int(index) if index else None


def _outcome(index: int | None) -> tuple[Any, ...]:
    """The call's value, or what it raised; a payload that cannot be loaded here (a
    module the job's interpreter lacks) is raised to the caller the same way."""
    import cloudpickle

    try:
        payload = cloudpickle.loads(_payload())
        args, kwargs = payload["calls"][index or 0]
        return ("value", payload["fn"](*args, **kwargs))
    except BaseException as exc:  # the caller's to see, whatever it is
        # From the function down: the runner's own frame says nothing to the caller.
        frames = exc.__traceback__.tb_next if exc.__traceback__ else None
        return ("raise", exc, "".join(traceback.format_exception(type(exc), exc, frames)))


def _dumped(outcome: tuple[Any, ...]) -> bytes:
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(outcome))
    except Exception as exc:  # an outcome that will not pickle is said as such
        text = f"{outcome[0]} could not be sent back ({type(exc).__name__}: {exc})"
        tb = outcome[2] if outcome[0] == "raise" else ""
        return bytes(cloudpickle.dumps(("raise", RuntimeError(text), tb)))


def _send(data: bytes, index: int | None) -> None:
    folder = os.environ.get(PAYLOAD_DIR_ENV)
    if folder:
        target = Path(folder) / result_name(index)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_bytes(data)
        os.replace(partial, target)
        return
    if len(data) > OUTPUT_CAP:
        note = f"the outcome's {len(data):,} bytes are over the {OUTPUT_CAP:,} sent in output"
        data = _dumped(("raise", RuntimeError(note + ": set JOBD_EXECUTOR_DIR"), ""))
    text = base64.b64encode(data).decode()
    step = LINE_BYTES * 4 // 3
    pieces = [text[i : i + step] for i in range(0, len(text), step)]
    sys.stdout.flush()
    out = [f"{RESULT_MARKER} {piece}\n" for piece in pieces]
    sys.stdout.write("\n" + "".join(out) + f"{END_MARKER} {len(pieces)}\n")
    sys.stdout.flush()


def main() -> int:
    index = _index()
    outcome = _outcome(index)
    if outcome[0] == "raise":
        sys.stderr.write(outcome[2])
    _send(_dumped(outcome), index)
    return 0 if outcome[0] == "value" else 1


if __name__ == "__main__":
    sys.exit(main())
