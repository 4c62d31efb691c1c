"""`job`'s tables are written as plain text when they can be, and read exactly as rich
laid them out before (jobd/cli/tables.py): same columns, same widths, same lines."""

from __future__ import annotations

import io
import os
import sys
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console
from rich.table import Table

from jobd.cli import render, tables
from jobd.cli.tables import PlainTable

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _rich_text(table: PlainTable, width: int = tables.PIPE_WIDTH) -> str:
    """What rich made of the table on a pipe before: a rich Table of str cells."""
    made = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in table.headers:
        made.add_column(header, overflow="fold")
    for row in table.rows:
        made.add_row(*row)
    console = Console(width=width, color_system=None, highlight=False, file=io.StringIO())
    with console.capture() as capture:
        console.print(made)
    return "".join(line.rstrip() + "\n" for line in capture.get().splitlines())


def _job(i: int, phase: str, **status: object) -> dict[str, object]:
    created = (NOW - timedelta(seconds=37 * i)).isoformat()
    return {
        "metadata": {
            "id": i,
            "name": f"job-{i}" * (1 + i % 3),
            "project": "p",
            "created_at": created,
        },
        "spec": {"command": ["python", "train.py", "--seed", str(i)], "resources": {"gpus": i % 2}},
        "status": {"phase": phase, "desired_phase": "Running", **status},
    }


JOBS = [
    _job(1, "Pending"),
    _job(22, "Running", worker="gpu-box-1", progress={"step": 5, "total": 10, "fraction": 0.5}),
    _job(333, "Failed", exit_code=3, worker="w"),
    _job(4444, "Succeeded", exit_code=0),
]


@pytest.mark.parametrize("wide", [False, True])
def test_the_jobs_table_reads_as_rich_made_it(wide: bool) -> None:
    table = render.jobs_table(JOBS, wide=wide, now=NOW)
    assert table.is_plain()
    assert render.to_text(table) == _rich_text(table)


def test_an_empty_cell_and_a_one_row_table_read_as_rich_made_them() -> None:
    table = PlainTable("A", "B", "C")
    table.add_row("", "x", "")
    assert render.to_text(table) == _rich_text(table) == "A  B  C\n   x\n"


def test_a_table_wider_than_its_width_is_folded_by_rich() -> None:
    table = PlainTable("ID", "COMMAND")
    table.add_row("1", "python " + "x" * 60)
    assert table.text_width() > 40
    folded = render.to_text(table, width=40)
    assert folded == _rich_text(table, width=40)
    assert len(folded.splitlines()) > 2


def test_text_whose_width_is_not_its_length_goes_to_rich() -> None:
    table = PlainTable("NAME")
    table.add_row("データ")  # two columns a character
    assert not table.is_plain()
    assert render.to_text(table) == _rich_text(table)


def test_a_cell_is_shown_as_written_never_as_rich_markup() -> None:
    table = PlainTable("COMMAND")
    table.add_row("python -c 'print(x[i])' [bold]")
    assert render.to_text(table) == "COMMAND\npython -c 'print(x[i])' [bold]\n"
    assert render.to_text(table.as_rich()) == render.to_text(table)


def test_on_a_pipe_print_table_writes_the_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    table = render.jobs_table(JOBS, now=NOW)
    tables.print_table(table)
    assert capsys.readouterr().out == _rich_text(table)


def _on_a_terminal(table: PlainTable, columns: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """What print_table writes to a terminal `columns` wide."""
    leader, follower = os.openpty()
    with os.fdopen(follower, "w", encoding="utf-8") as terminal:
        monkeypatch.setattr(sys, "stdout", terminal)
        monkeypatch.setenv("COLUMNS", str(columns))
        monkeypatch.setenv("TERM", "xterm")
        tables.print_table(table)
    with os.fdopen(leader, "rb") as written:
        return os.read(written.fileno(), 65536).decode().replace("\r\n", "\n")


def test_on_a_terminal_the_header_is_bold_and_a_narrow_one_folds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = PlainTable("ID", "COMMAND")
    table.add_row("1", "python train.py --lr 3e-4")
    wide = _on_a_terminal(table, 80, monkeypatch)
    assert wide == "\x1b[1mID  COMMAND\x1b[0m\n1   python train.py --lr 3e-4\n"
    narrow = _on_a_terminal(table, 16, monkeypatch)
    assert "python train.py --lr 3e-4" not in narrow  # folded by rich over several lines
    assert len(narrow.splitlines()) > 2 and "3e-4" in narrow
