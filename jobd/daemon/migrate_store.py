"""`jobd migrate-store --from URL --to URL`: move a whole store into an empty database.

The way from one host to several (docs/operations.md): stop the broker (its agents and
their jobs keep running), copy its SQLite store into a fresh PostgreSQL database, start
the broker(s) on PostgreSQL with the same data directory and tokens. The copy itself is
store/copying.py's, loaded only when the command runs (`jobd --help` stays light).

Exit codes: 0 moved; 1 not moved (a database unreachable, the copy failed and was rolled
back, a source that is no jobd store); 3 the target is not empty (nothing was written);
4 a broker still runs on the source (store/in_use.py; nothing was written).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from jobd.store.copying import Copied

__all__ = ["EXIT_NOT_MOVED", "EXIT_SOURCE_IN_USE", "EXIT_TARGET_NOT_EMPTY", "migrate_store"]

EXIT_NOT_MOVED = 1
EXIT_TARGET_NOT_EMPTY = 3
EXIT_SOURCE_IN_USE = 4


@click.command("migrate-store")
@click.option(
    "--from",
    "source",
    required=True,
    metavar="URL",
    help="The store to copy, e.g. sqlite:///$HOME/.local/share/jobd/jobd.db (only read).",
)
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    help="An empty database, e.g. postgresql://jobd@db-host/jobd (jobd creates the tables).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="The summary on stdout: a sentence, or one JSON object.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Copy from PostgreSQL although its lease says a broker leads (one that died "
    "less than a lease ago).",
)
def migrate_store(source: str, target: str, output: str, force: bool) -> None:
    """Copy a whole store (SQLite) into an empty database (PostgreSQL), in one transaction.

    \b
    Everything moves as stored: jobs (running ones with their attempts), arrays,
    dependencies, projects, workers, tokens (their digests), events, usage, the change
    log, and the counters, so new job ids and revisions continue past the old ones.
    The target is migrated to this jobd's schema in the same transaction: a copy that
    fails leaves it as it was. A target holding anything is refused (exit 3), and a
    source a broker still runs on (exit 4: a process holds the SQLite file open, or a
    PostgreSQL lease has not run out; --force passes over the lease).

    \b
    Stop the broker first (`systemctl stop jobd-broker`, or end `jobd broker`): its
    workers and their jobs keep running and catch up once a broker is back. Then:
      jobd migrate-store --from sqlite:///$DATA_DIR/jobd.db --to postgresql://...
      jobd broker --data-dir $DATA_DIR --db postgresql://...
    """
    from jobd.store.base import StoreUnavailable
    from jobd.store.copying import CopyRefused, SourceInUse, TargetNotEmpty, copy_store

    try:
        copied = copy_store(source, target, _progress, force=force)
    except TargetNotEmpty as exc:
        _fail(str(exc), EXIT_TARGET_NOT_EMPTY)
    except SourceInUse as exc:
        _fail(str(exc), EXIT_SOURCE_IN_USE)
    except (CopyRefused, StoreUnavailable) as exc:
        _fail(str(exc), EXIT_NOT_MOVED)
    except Exception as exc:  # the driver's own (a value the target refuses): one sentence
        reason = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"])[0]
        _fail(f"the copy failed and was rolled back, the target left as it was: {reason}", 1)
    if output == "json":
        click.echo(json.dumps(_summary(copied), indent=2))
    else:
        click.echo(_sentence(copied))


def _progress(line: str) -> None:
    click.echo(f"jobd migrate-store: {line}", err=True)


def _fail(message: str, code: int) -> None:
    click.echo(f"jobd: error: {message}", err=True)
    sys.exit(code)


def _summary(copied: Copied) -> dict[str, object]:
    return {
        "from": copied.source,
        "to": copied.target,
        "source_schema": copied.source_schema,
        "schema": copied.schema,
        "rows": copied.rows,
        "counters": copied.counters,
        "seconds": round(copied.seconds, 3),
    }


def _sentence(copied: Copied) -> str:
    jobs, events = copied.rows.get("jobs", 0), copied.rows.get("events", 0)
    revision = copied.counters.get("revision", 0)
    next_id = copied.counters.get("job_id", 0) + 1
    return (
        f"moved {copied.source} to {copied.target} in {copied.seconds:.1f} s: {jobs} jobs, "
        f"{events} events, {sum(copied.rows.values())} rows in all; revision {revision}, "
        f"the next job is {next_id}"
    )
