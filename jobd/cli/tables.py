"""The `job` command's tables, written as plain text in the layout rich would give them.

`job get` of 200 jobs spent three quarters of its time in rich (its import, and its
measuring, wrapping and cropping of every cell: 75 ms of CPU for 200 rows). A table whose
cells are plain one-line text and that fits its width needs none of that: each column is as
wide as its widest cell, columns two spaces apart, the header bold on a terminal. Only a
table that does not fit (a terminal narrower than it, or a pipe's 200 columns) or that holds
text whose width on screen is not its length is handed to rich, which folds the cells as
before. A test renders the same tables both ways and compares them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["PIPE_WIDTH", "PlainTable", "print_table"]

PIPE_WIDTH = 200  # wide enough that a table on a pipe never wraps mid-row
_GAP = "  "  # rich's padding of one space on each side of a cell, without the table's edge
_BOLD, _RESET = "\x1b[1m", "\x1b[0m"
# Characters outside ASCII that `job` itself prints and that take one column each.
_ONE_COLUMN = "→▏▎▍▌▋▊▉█"


class PlainTable:
    """Headers and rows of strings, nothing else: what every `job` table is."""

    def __init__(self, *headers: str) -> None:
        self.headers = list(headers)
        self.rows: list[list[str]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def widths(self) -> list[int]:
        columns = zip(self.headers, *self.rows, strict=True)
        return [max(map(len, column)) for column in columns]

    def is_plain(self) -> bool:
        """Every cell one line of text one column per character: no folding rules needed.
        (Asked of all the cells at once, a space apart: one pass in C for 200 rows.)"""
        return _plain_cell(" ".join(c for row in (self.headers, *self.rows) for c in row))

    def lines(self, *, bold_header: bool = False) -> list[str]:
        """The table's lines, each without trailing blanks (a pipe's reading)."""
        widths = self.widths()
        head = _line(self.headers, widths)
        if bold_header:
            head = f"{_BOLD}{head}{_RESET}"
        return [head, *(_line(row, widths) for row in self.rows)]

    def text_width(self) -> int:
        widths = self.widths()
        return sum(widths) + len(_GAP) * (len(widths) - 1)

    def as_rich(self) -> Table:
        """The same table as rich's, for what plain text cannot lay out."""
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for header in self.headers:
            table.add_column(header, overflow="fold")
        for row in self.rows:
            # Text, not str: a cell is shown as it is, never read as rich's [markup].
            table.add_row(*(Text(cell) for cell in row))
        return table


def _plain_cell(cell: str) -> bool:
    if not cell.isascii():
        for one_column in _ONE_COLUMN:
            cell = cell.replace(one_column, "")
    return cell.isascii() and cell.isprintable()


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return _GAP.join(map(str.ljust, cells, widths)).rstrip()


def print_table(table: PlainTable, *, stderr: bool = False) -> None:
    """Print the table: plain text when it fits, else through rich, which folds it."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = _terminal_width() if tty else PIPE_WIDTH
    if table.is_plain() and table.text_width() <= width:
        bold = tty and os.environ.get("TERM", "") not in ("dumb", "unknown")
        stream.write("".join(line + "\n" for line in table.lines(bold_header=bold)))
        return
    from jobd.cli import render

    render.emit(render.make_console(stderr=stderr), table.as_rich())


def _terminal_width() -> int:
    import shutil  # only for a terminal: with its archive modules it costs a pipe 1.5 ms

    return shutil.get_terminal_size((80, 25)).columns
