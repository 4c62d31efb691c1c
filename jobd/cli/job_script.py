"""The `job` console script: the collector held off while the command loads.

Everything `job` imports lives as long as the command, yet every 700 allocations made while
importing click, the wire and the verb's modules set the collector looking through all of
it again: ~7 M instructions of `job get`'s and `job --help`'s (docs/performance.md). So
the collector waits until `job_main.main()` has frozen what is loaded; then it runs as the
daemons' does. Kept apart from `job_main`, which tests import as a library.
"""

from __future__ import annotations

import gc

__all__ = ["main"]


def main() -> None:
    """The `job` command (pyproject.toml's console script)."""
    gc.disable()
    from jobd.cli.job_main import main as job

    job()
