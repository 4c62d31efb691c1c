"""Progress lines: what is read from a stream of chunks, and what the broker makes of them."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import timedelta

import pytest

from jobd.api.models import Phase
from jobd.api.progress import MAX_LINE_BYTES, MAX_METRICS, parse_line
from jobd.client import report_progress
from jobd.controllers import transitions
from jobd.controllers.errors import TransitionError
from jobd.controllers.progress import advance
from jobd.worker.progress import ProgressScanner
from tests.unit.conftest import NOW, job_in


def test_the_client_prints_a_line_the_worker_reads() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        report_progress(120, 4000, loss=0.31, stage="train")
    line = out.getvalue()
    assert line.startswith("jobd-progress {") and line.endswith("}\n")
    sample = parse_line(line.rstrip("\n").encode())
    assert sample == {"step": 120, "total": 4000, "metrics": {"loss": 0.31, "stage": "train"}}


def test_the_client_turns_scalars_of_array_libraries_into_numbers() -> None:
    class IntScalar:  # as numpy.int64 or an integer tensor
        def __index__(self) -> int:
            return 7

    class FloatScalar:  # as a float tensor
        def __float__(self) -> float:
            return 0.25

    out = io.StringIO()
    with redirect_stdout(out):
        report_progress(IntScalar(), 10, loss=FloatScalar())  # type: ignore[arg-type]
    sample = parse_line(out.getvalue().rstrip("\n").encode())
    assert sample == {"step": 7, "total": 10, "metrics": {"loss": 0.25}}


@pytest.mark.parametrize(
    "line",
    [
        b"jobd-progress {not json",
        b"jobd-progress [1, 2]",
        b'jobd-progress {"total": 10}',  # no step
        b'jobd-progress {"step": NaN}',
        b'jobd-progress {"step": -1}',
        b'jobd-progress {"step": true}',
        b'jobd-progress {"step": "12"}',
        b'jobd-progress {"step": 1, "x": "' + b"a" * MAX_LINE_BYTES + b'"}',  # too long
        b'jobd-progress {"step": 1}\xff',
        b'  jobd-progress {"step": 1}',  # not at the start of the line
        b"jobd-progressive " + b'{"step": 1}',
        b"jobd-progress " + b"[" * 100_000,
    ],
)
def test_a_malformed_line_is_ignored(line: bytes) -> None:
    assert parse_line(line) is None


def test_metrics_keep_finite_numbers_and_short_strings_only() -> None:
    said = {"step": 3, "total": 0, "nan": float("nan"), "flag": True, "none": None, "l": [1]}
    said |= {"big": 10**30, "text": "x" * 500, "": 1, "k" * 65: 1, "ok": 2.5}
    line = b"jobd-progress " + json.dumps(said).encode()
    sample = parse_line(line)
    assert sample == {"step": 3, "metrics": {"text": "x" * 128, "ok": 2.5}}  # total 0: none
    many = {"step": 1, **{f"m{i}": i for i in range(100)}}
    sample = parse_line(b"jobd-progress " + json.dumps(many).encode())
    assert sample is not None and len(sample["metrics"]) == MAX_METRICS


def test_the_scanner_finds_the_newest_line_across_chunks() -> None:
    scanner = ProgressScanner()
    assert scanner.feed(b'epoch 1\njobd-progress {"st') is None
    assert scanner.feed(b'ep": 5}\njobd-progress {"step": 6') == {"step": 5, "metrics": {}}
    assert scanner.feed(b"}\r\nnoise\njobd-progress {bad}\n") == {"step": 6, "metrics": {}}
    assert scanner.feed(b"no progress here\n") is None


def test_the_scanner_skips_an_overlong_line_to_its_end() -> None:
    scanner = ProgressScanner()
    assert scanner.feed(b'jobd-progress {"step": 1, "pad": "') is None
    for _ in range(3):
        assert scanner.feed(b"a" * MAX_LINE_BYTES) is None
    assert scanner.feed(b'"}\njobd-progress {"step": 2}\n') == {"step": 2, "metrics": {}}


def test_fraction_and_eta_come_from_the_rate_since_the_first_sample() -> None:
    first = advance(None, {"step": 100, "total": 1000, "metrics": {"loss": 1.0}}, NOW)
    assert (first.fraction, first.eta_s) == (0.1, None)  # no rate yet
    later = NOW + timedelta(seconds=60)
    second = advance(first, {"step": 400, "total": 1000, "metrics": {"loss": 0.5}}, later)
    # 300 steps in 60 s: 600 left take 120 s
    assert (second.fraction, second.eta_s, second.metrics) == (0.4, 120, {"loss": 0.5})
    assert (second.first_step, second.first_at, second.updated_at) == (100, NOW, later)
    again = advance(second, {"step": 10, "total": 1000}, later)  # started over: a new rate
    assert (again.first_step, again.eta_s) == (10, None)
    open_ended = advance(second, {"step": 2000}, later)
    assert (open_ended.fraction, open_ended.eta_s) == (None, None)
    past = advance(second, {"step": 1500, "total": 1000}, later)
    assert (past.fraction, past.eta_s) == (1.0, 0)


def test_progress_is_kept_while_bound_and_left_alone_once_ended() -> None:
    sample = {"step": 5, "total": 10, "metrics": {}}
    job, events = transitions.progress(job_in(Phase.RUNNING), "w", sample, NOW)
    assert job.status.progress is not None and job.status.progress.fraction == 0.5
    assert events == []  # never an event per line
    ended = job_in(Phase.SUCCEEDED)
    assert transitions.progress(ended, "w", sample, NOW) == (ended, [])
    with pytest.raises(TransitionError, match="bound to"):
        transitions.progress(job_in(Phase.RUNNING), "other", sample, NOW)
