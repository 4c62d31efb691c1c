"""One frame of `job top`: workers and their GPUs, running jobs, the queue, preemptions.

A pure function of the documents the broker answered (`Snapshot`), what the user chose
(`Screen`: size, project, selected job, a prompt being typed) and `now`, so a frame is
tested without a terminal; top.py fetches and draws. Plain SSH at 80x24 is the floor:
every row is one line (cells are cut with an ellipsis, never wrapped), columns that help
least go first as the width shrinks, and the four sections share the height by the rows
each wants, each keeping its title and header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from jobd.api.sizes import format_size
from jobd.cli import render

__all__ = ["CHROME_LINES", "Screen", "Snapshot", "allot", "frame", "pending_reason", "selectable"]

Document = Mapping[str, Any]
SECTIONS = 4
# The title line, the footer line, and each section's title and header lines.
CHROME_LINES = 2 + 2 * SECTIONS
KEYS = "q quit  p project  ↑↓ select  l/⏎ logs"


@dataclass
class Snapshot:
    """What the broker answered for one refresh."""

    workers: Sequence[Document] = field(default_factory=list)
    running: Sequence[Document] = field(default_factory=list)  # bound jobs in the project shown
    holders: Sequence[Document] = field(default_factory=list)  # every bound job: who holds a GPU
    queued: Sequence[Document] = field(default_factory=list)  # Pending, in the scheduler's order
    queued_total: int = 0
    queued_more: bool = False  # the queue is longer than what was listed
    # auto_preempt events, newest last
    preemptions: Sequence[Document] = field(default_factory=list)
    error: str | None = None  # the last refresh failed: what is shown is older


@dataclass
class Screen:
    """What the user sees through: the terminal's size, and what they chose."""

    width: int = 80
    height: int = 24
    server: str = ""
    project: str | None = None
    selected: int | None = None  # a job id, running or queued
    prompt: str | None = None  # the project being typed after `p`
    notice: str | None = None  # said in the footer until the next key
    live: bool = True  # full screen: tables span the width, the keys are shown


def selectable(snapshot: Snapshot) -> list[int]:
    """The job ids a user can select, in the order shown: running, then queued."""
    return [_job_id(j) for j in [*snapshot.running, *snapshot.queued]]


def frame(snapshot: Snapshot, screen: Screen, now: datetime | None = None) -> RenderableType:
    """The title line, the four sections in the rows they were given, the footer."""
    now = now or datetime.now(UTC)
    sections = [_gpu_rows(snapshot), _running_rows(snapshot, now), _queued_rows(snapshot, now)]
    sections.append(_preemption_rows(snapshot))
    wanted = [len(rows) for _, rows in sections]
    given = allot(wanted, screen.height - CHROME_LINES)
    tables = [
        _table(title, rows, shown, screen)
        for (title, rows), shown in zip(sections, given, strict=True)
    ]
    footer = [_footer(snapshot, screen)] if screen.live or snapshot.error else []
    return Group(_title(snapshot, screen, now), *tables, *footer)


def allot(wanted: Sequence[int], rows: int) -> list[int]:
    """Rows for each section: one at a time, in turn, to each that wants more."""
    given = [0] * len(wanted)
    while rows > 0 and any(g < w for g, w in zip(given, wanted, strict=True)):
        for i, want in enumerate(wanted):
            if rows > 0 and given[i] < want:
                given[i] += 1
                rows -= 1
    return given


# -- sections: (title, rows); a row is (job id or None, {column: cell}) ----------------------

Row = tuple[int | None, dict[str, str]]
Section = tuple[str, list[Row]]


def _gpu_rows(snapshot: Snapshot) -> Section:
    holders = _holders(snapshot.holders)
    rows: list[Row] = []
    for worker in snapshot.workers:
        name = str((worker.get("metadata") or {}).get("name", "?"))
        spec, status = worker.get("spec") or {}, worker.get("status") or {}
        first = {
            "WORKER": name,
            "STATUS": _worker_status(spec, status),
            "SLOTS": f"{_slots_used(snapshot.holders, name)}/{spec.get('slots', 1)}",
        }
        gpus = spec.get("gpus") or []
        if not gpus:
            rows.append((None, {**first, "GPU": "-"}))
        for i, gpu in enumerate(gpus):
            cells = first if i == 0 else {}
            job = holders.get((name, int(gpu)))
            rows.append((None, {**cells, **_gpu_cells(spec, status, int(gpu), job)}))
    return f"WORKERS {len(snapshot.workers)}", rows


def _gpu_cells(spec: Document, status: Document, gpu: int, job: Document | None) -> dict[str, str]:
    total = (spec.get("gpu_memory") or {}).get(str(gpu))
    usage = (status.get("gpu_usage") or {}).get(str(gpu)) or {}
    used, busy = usage.get("memory_used"), usage.get("utilization")
    memory = f"{_size(used)}/{_size(total)}" if used is not None or total else "-"
    holder = f"{_job_id(job)} {_ref(job)}" if job else "-"
    return {
        "GPU": str(gpu),
        "MEMORY": memory,
        "UTIL": "-" if busy is None else f"{round(busy * 100)}%",
        "JOB": holder,
    }


def _running_rows(snapshot: Snapshot, now: datetime) -> Section:
    rows: list[Row] = []
    for job in snapshot.running:
        status = job.get("status") or {}
        cells = {
            "ID": str(_job_id(job)),
            "NAME": _ref(job),
            "PHASE": render.phase_text(job),
            "WORKER": status.get("worker") or "-",
            "GPUS": ",".join(str(g) for g in status.get("gpus") or []) or "-",
            "PROGRESS": render.progress_text(job),
            "ETA": render.eta_text(job),
            "AGE": _since(status.get("started_at"), now),
        }
        rows.append((_job_id(job), cells))
    return f"RUNNING {len(rows)}", rows


def _queued_rows(snapshot: Snapshot, now: datetime) -> Section:
    rows: list[Row] = []
    for job in snapshot.queued:
        status = job.get("status") or {}
        cells = {
            "ID": str(_job_id(job)),
            "NAME": _ref(job),
            "PRIO": _priority(job),
            "WAIT": _since(status.get("queued_at") or _created(job), now),
            "REASON": pending_reason(job),
        }
        rows.append((_job_id(job), cells))
    more = "+" if snapshot.queued_more else ""
    return f"QUEUED {snapshot.queued_total}{more}", rows


def pending_reason(job: Document) -> str:
    """Why a queued job waits: a `Scheduled=False` condition's reason and message where
    the broker says one (`QuotaExceeded: ...`), else what `job status` says."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        said = cond.get("type") == "Scheduled" and cond.get("status") == "False"
        if said and cond.get("reason") not in (None, "", "Unschedulable"):
            message = cond.get("message")
            return f"{cond['reason']}: {message}" if message else str(cond["reason"])
    return render.waiting_for(job) or "-"


def _preemption_rows(snapshot: Snapshot) -> Section:
    rows: list[Row] = []
    for event in reversed(snapshot.preemptions):  # newest first
        ts = _time(event.get("ts"))
        candidate = event.get("candidate_job")
        cells = {
            "TIME": ts.astimezone(UTC).strftime("%H:%M:%SZ") if ts else "-",
            "JOB": str(event.get("job", "-")),
            "FOR": "-" if candidate is None else str(candidate),
            "REASON": str(event.get("reason", "-")),
            "PRIO": _priorities(event.get("priority"), event.get("candidate_priority")),
        }
        rows.append((None, cells))
    return "RECENT PREEMPTIONS", rows


# -- columns: what each section shows at a width ---------------------------------------------

# (header, the narrowest screen it is shown on, ratio of spare width it takes, or 0)
_COLUMNS: dict[str, list[tuple[str, int, int]]] = {
    "WORKERS": [
        ("WORKER", 0, 2),
        ("STATUS", 0, 0),
        ("SLOTS", 60, 0),
        ("GPU", 0, 0),
        ("MEMORY", 0, 0),
        ("UTIL", 0, 0),
        ("JOB", 0, 3),
    ],
    "RUNNING": [
        ("ID", 0, 0),
        ("NAME", 0, 3),
        ("PHASE", 100, 0),
        ("WORKER", 0, 1),
        ("GPUS", 70, 0),
        ("PROGRESS", 0, 0),
        ("ETA", 0, 0),
        ("AGE", 70, 0),
    ],
    "QUEUED": [("ID", 0, 0), ("NAME", 0, 2), ("PRIO", 60, 0), ("WAIT", 0, 0), ("REASON", 0, 4)],
    "RECENT": [("TIME", 0, 0), ("JOB", 0, 0), ("FOR", 0, 0), ("REASON", 0, 1), ("PRIO", 90, 1)],
}


def _table(title: str, rows: list[Row], shown: int, screen: Screen) -> Table:
    table = Table(
        title=Text(title, style="bold"),
        title_justify="left",
        box=None,
        pad_edge=False,
        show_edge=False,
        header_style="bold dim",
        expand=screen.live,
        padding=(0, 1),
    )
    columns = [c for c in _COLUMNS[title.split()[0]] if screen.width >= c[1]]
    for header, _, ratio in columns:
        table.add_column(header, no_wrap=True, overflow="ellipsis", ratio=ratio or None)
    headers = [h for h, _, _ in columns]
    for job_id, cells in _cut(rows, shown):
        style = "reverse" if job_id is not None and job_id == screen.selected else None
        table.add_row(*(cells.get(h, "") for h in headers), style=style)
    if len(rows) > shown > 0:
        table.add_row("…", f"{len(rows) - shown + 1} more", style="dim")
    return table


def _cut(rows: list[Row], shown: int) -> list[Row]:
    """The rows that fit in `shown` lines, one of them kept to say how many did not."""
    return rows if len(rows) <= shown else rows[: max(shown - 1, 0)]


def _title(snapshot: Snapshot, screen: Screen, now: datetime) -> Text:
    project = screen.project or "all projects"
    clock = now.astimezone(UTC).strftime("%H:%M:%SZ")
    text = Text(f"jobd top  {screen.server}  {project}  {clock}", style="bold", no_wrap=True)
    text.truncate(screen.width, overflow="ellipsis")
    return text


def _footer(snapshot: Snapshot, screen: Screen) -> Text:
    if screen.prompt is not None:
        line = Text(f"project (empty: all, Esc: keep): {screen.prompt}▏", style="bold")
    elif snapshot.error:
        line = Text(f"{snapshot.error} (showing the last answer)  {KEYS}", style="red")
    else:
        line = Text(screen.notice or KEYS, style="dim")
    line.no_wrap = True
    line.truncate(screen.width, overflow="ellipsis")
    return line


# -- small readings of documents -------------------------------------------------------------


def _job_id(job: Document) -> int:
    return int((job.get("metadata") or {}).get("id", 0))


def _created(job: Document) -> Any:
    return (job.get("metadata") or {}).get("created_at")


def _holders(bound: Sequence[Document]) -> dict[tuple[str, int], Document]:
    """(worker, gpu) -> the job holding it."""
    held: dict[tuple[str, int], Document] = {}
    for job in bound:
        status = job.get("status") or {}
        for gpu in status.get("gpus") or []:
            held[(str(status.get("worker")), int(gpu))] = job
    return held


def _slots_used(bound: Sequence[Document], worker: str) -> int:
    """CPU-only jobs take a slot each; a GPU job takes its GPUs and no slot."""
    return sum(
        1
        for job in bound
        if (job.get("status") or {}).get("worker") == worker
        and not ((job.get("spec") or {}).get("resources") or {}).get("gpus")
    )


def _worker_status(spec: Document, status: Document) -> str:
    phase = str(status.get("phase", "Ready"))
    return f"{phase},Cordoned" if spec.get("cordoned") else phase


def _ref(job: Document) -> str:
    meta = job.get("metadata") or {}
    return f"{meta.get('project') or 'default'}/{meta.get('name') or '?'}"


def _priority(job: Document) -> str:
    effective = (job.get("status") or {}).get("effective") or {}
    value = effective.get("priority", (job.get("spec") or {}).get("priority"))
    return "-" if value is None else str(value)


def _priorities(victim: Any, candidate: Any) -> str:
    """`40<70`: the preempted job's priority below the queued one's, where both are said."""
    if victim is None:
        return "-"
    return f"{victim}<{candidate}" if candidate is not None else str(victim)


def _size(value: Any) -> str:
    return format_size(int(value)) if value is not None else "-"


def _time(value: Any) -> datetime | None:
    try:
        ts = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return ts.replace(tzinfo=ts.tzinfo or UTC) if ts else None


def _since(value: Any, now: datetime) -> str:
    ts = _time(value)
    return render.format_age((now - ts).total_seconds()) if ts else "-"
