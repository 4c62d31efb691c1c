"""How the `job` command shows things: tables, lines and diffs built from resource dicts.

Pure functions of the documents the broker returns (and of `now`, so ages are testable);
`job_main` decides what to fetch and these decide how it reads. Output meant for a pipe is
plain: no colour, no wrapping at 80 columns, no trailing blanks.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jobd.api.vocabulary import TERMINAL_PHASES, Phase
from jobd.cli.gangs import members_table, nodes_text, worker_text, workers_text
from jobd.cli.tables import PIPE_WIDTH, PlainTable, print_table

if TYPE_CHECKING:  # rich is loaded only for what plain text cannot show (tables.py)
    from rich.console import Console, RenderableType

__all__ = [
    "array_line",
    "describe_job",
    "diff_text",
    "emit",
    "event_header_text",
    "event_line",
    "event_row",
    "event_row_text",
    "events_table",
    "format_age",
    "jobs_table",
    "make_console",
    "phase_text",
    "print_table",
    "projects_table",
    "status_line",
    "status_table",
    "to_json",
    "to_text",
    "victim_line",
    "wait_reason",
    "waiting_for",
    "watch_line",
    "workers_table",
]

Document = Mapping[str, Any]
_EVENT_KEYS = ("ts", "event", "job", "seq", "reason")


# -- consoles --------------------------------------------------------------------------------


def make_console(stderr: bool = False) -> Console:
    """A console that colours and measures a terminal, and writes plain text to a pipe."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(
        file=stream,
        width=None if tty else PIPE_WIDTH,
        color_system="auto" if tty else None,
        highlight=False,
        emoji=False,  # nothing jobd shows is meant as :emoji: (and the codes take ~5 ms to load)
        stderr=stderr,
    )


def emit(console: Console, renderable: RenderableType) -> None:
    """Print; on a pipe, without the blanks rich pads the last column with."""
    if console.is_terminal:
        console.print(renderable)
        return
    with console.capture() as capture:
        console.print(renderable)
    lines = capture.get().splitlines()
    console.file.write("".join(line.rstrip() + "\n" for line in lines))


def to_text(renderable: RenderableType | PlainTable, width: int = PIPE_WIDTH) -> str:
    """The renderable as plain text, the way a pipe would see it."""
    if isinstance(renderable, PlainTable):
        if renderable.is_plain() and renderable.text_width() <= width:
            return "".join(line + "\n" for line in renderable.lines())
        renderable = renderable.as_rich()
    from rich.console import Console

    console = Console(width=width, color_system=None, highlight=False, file=io.StringIO())
    with console.capture() as capture:
        console.print(renderable)
    return "".join(line.rstrip() + "\n" for line in capture.get().splitlines())


def _table(*headers: str) -> PlainTable:
    return PlainTable(*headers)


# -- time ------------------------------------------------------------------------------------


def format_age(seconds: float) -> str:
    """Compact like kubectl, two units at most: 45s, 2m10s, 3h4m, 2d3h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _age(value: Any, now: datetime) -> str:
    ts = _parse_time(value)
    return format_age((now - ts).total_seconds()) if ts else "-"


def _now(now: datetime | None) -> datetime:
    return now or datetime.now(UTC)


# -- jobs ------------------------------------------------------------------------------------


def _status(job: Document) -> Document:
    status: Document = job.get("status") or {}
    return status


def _spec(job: Document) -> Document:
    spec: Document = job.get("spec") or {}
    return spec


def _ref(job: Document) -> str:
    meta = job.get("metadata") or {}
    return f"{meta.get('project') or 'default'}/{meta.get('name') or '?'}"


def _id(job: Document) -> str:
    return str((job.get("metadata") or {}).get("id", "-"))


_TERMINAL = frozenset(p.value for p in TERMINAL_PHASES)  # as they are read: plain strings
_PENDING = Phase.PENDING.value


def _is_terminal(phase: Any) -> bool:
    return phase in _TERMINAL


def phase_text(job: Document) -> str:
    """`Phase`, or `Phase→Desired` while a live job is converging."""
    status = _status(job)
    phase, desired = status.get("phase", _PENDING), status.get("desired_phase")
    if desired and desired != phase and not _is_terminal(phase):
        return f"{phase}→{desired}"
    return str(phase)


def _priority(job: Document) -> str:
    effective = _status(job).get("effective") or {}
    value = effective.get("priority", _spec(job).get("priority"))
    return "-" if value is None else str(value)


def _gpus(job: Document) -> str:
    assigned = _status(job).get("gpus") or []
    if assigned:
        return ",".join(str(g) for g in assigned)
    resources = _spec(job).get("resources") or {}
    wanted, memory = resources.get("gpus", 0), resources.get("gpu_memory")
    if not wanted:
        return "-"
    from jobd.api.sizes import format_size

    each = f"x{format_size(int(memory))}" if memory else ""
    return f"({wanted}{each})"  # parenthesised: asked for, not yet assigned


def _exit(job: Document) -> str:
    status = _status(job)
    if status.get("exit_signal") is not None:
        return f"sig {status['exit_signal']}"
    code = status.get("exit_code")
    return "-" if code is None else str(code)


def progress_text(job: Document) -> str:
    """`120/4000 3%` (the percentage rounded down), `120` without a total, `-` without any."""
    progress = _status(job).get("progress")
    if not isinstance(progress, dict) or progress.get("step") is None:
        return "-"
    step, total, fraction = progress["step"], progress.get("total"), progress.get("fraction")
    if total is None:
        return _number(step)
    percent = f" {int(fraction * 100)}%" if isinstance(fraction, int | float) else ""
    return f"{_number(step)}/{_number(total)}{percent}"


def eta_text(job: Document) -> str:
    """The progress' ETA as an age (`1h30m`), `-` while unknown."""
    eta = (_status(job).get("progress") or {}).get("eta_s")
    return "-" if eta is None else format_age(eta)


_BAR_WIDTH = 20
_BAR_METRICS = 3  # the first few metrics, so the line fits a terminal


def progress_line(job: Document) -> str:
    """`120/4000 3% [█▌        ] eta 1h30m loss=0.31`: a job's progress on one line, the
    bar only with a total; empty when the job reported none."""
    text = progress_text(job)
    if text == "-":
        return ""
    progress = _status(job)["progress"]
    fraction = progress.get("fraction")
    if isinstance(fraction, int | float):
        text += f" [{_bar(fraction)}]"
    if progress.get("eta_s") is not None:
        text += f" eta {eta_text(job)}"
    metrics = list((progress.get("metrics") or {}).items())[:_BAR_METRICS]
    shown = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics)
    return " ".join([text, *shown])


def _bar(fraction: float) -> str:
    eighths = int(max(0.0, min(fraction, 1.0)) * _BAR_WIDTH * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if full < _BAR_WIDTH else ""
    return ("█" * full + partial).ljust(_BAR_WIDTH)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def jobs_table(
    jobs: Iterable[Document], *, wide: bool = False, now: datetime | None = None
) -> PlainTable:
    now = _now(now)
    headers = ["ID", "NAME", "PHASE", "PRIO", "WORKER", "PROGRESS", "AGE"]
    if wide:
        import shlex  # as sizes in _gpus: for -o wide, not every table

        headers += ["ETA", "DESIRED", "NODES", "GPUS", "EXIT", "COMMAND"]
    table = _table(*headers)
    for job in jobs:
        status = _status(job)
        created = (job.get("metadata") or {}).get("created_at")
        row = [_id(job), _ref(job), phase_text(job), _priority(job)]
        row += [_worker_or_reason(status), progress_text(job), _age(created, now)]
        if wide:
            command = shlex.join(_spec(job).get("command") or [])
            row += [eta_text(job), status.get("desired_phase") or "-", nodes_text(job)]
            row += [_gpus(job), _exit(job), command]
        table.add_row(*row)
    return table


def _worker_or_reason(status: Document) -> str:
    """The job's worker; for a Pending job, why it waits, in parentheses (squeue's
    NODELIST(REASON): `(WaitingForCapacity)`)."""
    if status.get("phase", _PENDING) != _PENDING:
        return worker_text(status)  # of a multi-host job: rank 0's, then `+N` more
    reason = wait_reason(status)
    return f"({reason})" if reason else "-"


def wait_reason(status: Document) -> str | None:
    """A queued job's reason (api/wait_reasons.py): its `Scheduled=False` condition's,
    else what its status shows: a ready job that says none waits for room (admission
    writes no condition for it; nor did a job stored before reasons were written)."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Scheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "") or None
    if status.get("retry_at"):
        return "RetryBackoff"
    if status.get("dependencies_met") is False:
        return "WaitingForDependencies"
    return "WaitingForCapacity"


def watch_line(op: str, job: Document, now: datetime | None = None) -> str:
    """One line per change seen by `job get -w`."""
    status = _status(job)
    parts = [op, _id(job), _ref(job), phase_text(job), f"prio={_priority(job)}"]
    parts.append(f"worker={worker_text(status)}")
    if status.get("progress"):
        parts.append(f"progress={progress_text(job)}")
    if _is_terminal(status.get("phase")):
        parts.append(f"exit={_exit(job)}")
    return "  ".join(parts)


_WAITING_FOR = {
    "Pending": "waiting for capacity",
    "Scheduled": "waiting for the worker to start it",
    "Preempting": "waiting for the workload to checkpoint and exit",
    "Cancelling": "waiting for the workload to exit",
    "Lost": "waiting for its worker to come back",
}


def status_line(job: Document, now: datetime | None = None) -> str:
    """`7 Pending→Running 2m10s waiting for capacity`: what a converging job waits for."""
    status = _status(job)
    since = status.get("stopping_at") or status.get("queued_at")
    return f"{_id(job)} {phase_text(job)} {_age(since, _now(now))} {_why(status)}".rstrip()


def unschedulable(job: Document) -> str | None:
    """The message of a queued job's `Scheduled=False, Unschedulable` condition, if any."""
    return _unschedulable(_status(job))


def _unschedulable(status: Document) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Scheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message") or "no worker could run it")
    return None


def waiting_for(job: Document) -> str:
    """What a converging job waits for (`unschedulable: ...`, `waiting for capacity`)."""
    return _why(_status(job))


def _why(status: Document) -> str:
    if status.get("message"):
        return str(status["message"])
    phase = status.get("phase", "")
    if phase == "Pending" and (said := _unschedulable(status)) is not None:
        return f"unschedulable: {said}"
    if phase == "Pending" and status.get("dependencies_met") is False:
        return "waiting for dependencies"
    return status.get("reason") or _WAITING_FOR.get(phase, "")


# The order phases are counted in on an array's line: finished first, as `squeue` would not.
_PHASE_ORDER = (
    "Succeeded",
    "Failed",
    "Cancelled",
    "Preempted",
    "Running",
    "Preempting",
    "Cancelling",
    "Lost",
    "Scheduled",
    "Pending",
)


def array_line(array: Document) -> str:
    """`A12 sweep-lr 6 jobs: 4 Succeeded, 2 Running` (the project's name before it
    outside the default project)."""
    meta, status = array.get("metadata") or {}, array.get("status") or {}
    project = meta.get("project")
    name = meta.get("name") if project in (None, "default") else f"{project}/{meta.get('name')}"
    phases: dict[str, int] = status.get("phases") or {}
    order = [p for p in _PHASE_ORDER if p in phases] + sorted(set(phases) - set(_PHASE_ORDER))
    counts = ", ".join(f"{phases[p]} {p}" for p in order)
    size = status.get("size", 0)
    gone = size - sum(phases.values())
    if gone:
        counts += f"{', ' if counts else ''}{gone} deleted"
    return f"A{meta.get('id')} {name} {size} job{'s' if size != 1 else ''}: {counts}"


def victim_line(victim: Document) -> str:
    """`job/12 long-training/resnet (priority 10) on gpu-box-1`; a gang's line names
    every member's worker (`on gpu-box-1, gpu-box-2`)."""
    workers = workers_text(_status(victim))
    return f"job/{_id(victim)} {_ref(victim)} (priority {_priority(victim)}) on {workers}"


# -- describe --------------------------------------------------------------------------------


def describe_job(
    job: Document, events: Sequence[Document], now: datetime | None = None
) -> list[RenderableType]:
    """Spec, status, conditions and events, in that order, as printable blocks."""
    now = _now(now)
    meta, status = job.get("metadata") or {}, dict(_status(job))
    conditions = status.pop("conditions", [])
    head = (
        f"Job {_id(job)}  {_ref(job)}  {phase_text(job)}  (age {_age(meta.get('created_at'), now)})"
    )
    from rich.padding import Padding

    from jobd.api.manifests import dump_yaml

    spec_yaml, status_yaml = dump_yaml([dict(_spec(job))]), dump_yaml([status])
    conditions_block = _conditions_table(conditions, now).as_rich() if conditions else "<none>"
    events_block = events_table(events).as_rich() if events else "<none>"
    members = members_table(status)  # a multi-host job's, one row per rank
    return [
        head,
        *_section("Spec", _indent(spec_yaml)),
        *_section("Status", _indent(status_yaml)),
        *(_section("Members", Padding(members.as_rich(), (0, 0, 0, 2))) if members else []),
        *_section("Conditions", Padding(conditions_block, (0, 0, 0, 2))),
        *_section("Events", Padding(events_block, (0, 0, 0, 2))),
    ]


def _section(title: str, body: RenderableType) -> list[RenderableType]:
    return ["", f"{title}:", body]


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").splitlines())


def _conditions_table(conditions: Sequence[Document], now: datetime) -> PlainTable:
    table = _table("TYPE", "STATUS", "REASON", "MESSAGE", "SINCE")
    for cond in conditions:
        since = _age(cond.get("last_transition_time"), now)
        table.add_row(
            cond.get("type", ""),
            cond.get("status", ""),
            cond.get("reason") or "-",
            cond.get("message") or "-",
            since,
        )
    return table


# -- events ----------------------------------------------------------------------------------


def event_line(event: Document) -> str:
    """The event exactly as its events.jsonl line: the broker's `seq` is not part of it."""
    return json.dumps({k: v for k, v in event.items() if k != "seq"}, separators=(",", ":"))


def _event_details(event: Document) -> str:
    return " ".join(
        f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
        for k, v in event.items()
        if k not in _EVENT_KEYS
    )


def _event_time(event: Document) -> str:
    """The event's time to the second, as `2026-12-02 14:10:00Z`: a person's reading."""
    ts = _parse_time(event.get("ts"))
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if ts else str(event.get("ts", ""))


def _event_reason(event: Document) -> str:
    """Why it happened: its `reason`, else what a job's end or a preemption says."""
    if event.get("reason"):
        return str(event["reason"])
    if event.get("event") == "job_finished":
        code = event.get("exit_code")
        return f"{event.get('phase', '')}" + ("" if code is None else f" (exit {code})")
    return "-"


def events_table(events: Iterable[Document], *, wide: bool = False) -> PlainTable:
    """TIME EVENT JOB REASON, and every other field under DETAILS when wide."""
    table = _table("TIME", "EVENT", "JOB", "REASON", *(["DETAILS"] if wide else []))
    for event in events:
        table.add_row(*event_row(event, wide=wide))
    return table


def event_row(event: Document, *, wide: bool = False) -> list[str]:
    job = event.get("job")
    row = [
        _event_time(event),
        str(event.get("event", "")),
        "-" if job is None else f"job/{job}",
        _event_reason(event),
    ]
    return row + ([_event_details(event) or "-"] if wide else [])


_EVENT_WIDTHS = (21, 22, 11)  # TIME, EVENT, JOB: a followed row lines up with the header


def event_row_text(event: Document, *, wide: bool = False) -> str:
    """An events table row as one line, for following (`-f`)."""
    return _padded(event_row(event, wide=wide))


def event_header_text(*, wide: bool = False) -> str:
    """The header above the lines `event_row_text` prints."""
    return _padded(["TIME", "EVENT", "JOB", "REASON", *(["DETAILS"] if wide else [])])


def _padded(row: Sequence[str]) -> str:
    cells = [cell.ljust(width) for cell, width in zip(row, _EVENT_WIDTHS, strict=False)]
    return " ".join(cells + list(row[len(cells) :])).rstrip()


# -- workers ---------------------------------------------------------------------------------


def workers_table(
    workers: Iterable[Document],
    bound: Iterable[Document],
    now: datetime | None = None,
    *,
    wide: bool = False,
) -> PlainTable:
    """NAME STATUS SLOTS GPUS LEASE JOBS. SLOTS: CPU jobs running / slots; GPUS: each GPU
    as `index:memory(job)`, `-` for a free one (`job workers` shows who holds what).
    Wide adds ADDRESS: where multi-host jobs reach the worker (`--advertise-address`)."""
    now = _now(now)
    slots_used, holders = _usage(bound)
    headers = ["NAME", "STATUS", "SLOTS", "GPUS", "LEASE", "JOBS"]
    more = ["HOST", "ADDRESS", "RUNNER", "AGE", "CPUS", "MEMORY", "LIMITS", "LABELS", "RUN-AS"]
    table = _table(*headers, *(more if wide else []))
    held = _held(bound) if wide else {}
    for worker in workers:
        name = (worker.get("metadata") or {}).get("name", "?")
        spec, status = worker.get("spec") or {}, worker.get("status") or {}
        gpus = _worker_gpus(spec, status, holders.get(name, {}), wide=wide)
        jobs = ",".join(str(j) for j in status.get("jobs") or []) or "-"
        slots = f"{slots_used.get(name, 0)}/{spec.get('slots', 1)}"
        lease = f"{_age(status.get('last_renewal'), now)} ago"
        row = [name, _worker_status(spec, status), slots, gpus, lease, jobs]
        if wide:
            row += [status.get("hostname") or "-", status.get("address") or "-"]
            row.append(status.get("runner") or "-")
            row.append(_age(status.get("registered_at"), now))
            cpus, memory, labels = _inventory(spec, held.get(name, (0, 0)))
            row += [cpus, memory, _enforcement(spec), labels]
            row.append(status.get("runs_as") or "-")  # `owner`, or the user every job runs as
        table.add_row(*row)
    return table


def _held(bound: Iterable[Document]) -> dict[str, tuple[int, int]]:
    """Per worker: the millicpus and bytes of memory its jobs hold."""
    held: dict[str, tuple[int, int]] = {}
    for job in bound:
        worker = _status(job).get("worker") or ""
        resources = _spec(job).get("resources") or {}
        cpus, memory = held.get(worker, (0, 0))
        cpus += round(float(resources.get("cpus") or 0) * 1000)
        memory += int(resources.get("memory") or 0)
        held[worker] = (cpus, memory)
    return held


def _inventory(spec: Document, held: tuple[int, int]) -> list[str]:
    """CPUS and MEMORY as free/total (`-` where the worker says none), then LABELS."""
    from jobd.api.sizes import format_size

    cpus, memory = spec.get("cpus"), spec.get("memory")
    free_cpus = "-" if cpus is None else f"{(round(cpus * 1000) - held[0]) / 1000:g}/{cpus:g}"
    free_memory = (
        "-" if memory is None else f"{format_size(max(0, memory - held[1]))}/{format_size(memory)}"
    )
    labels = ",".join(f"{k}={v}" for k, v in sorted((spec.get("labels") or {}).items()))
    return [free_cpus, free_memory, labels or "-"]


def _enforcement(spec: Document) -> str:
    """LIMITS: how the worker holds jobs to their cpus and memory, `cpu,memory`
    (affinity,cgroup-v1), `-` where it says none (an older agent)."""
    enforcement = spec.get("enforcement") or {}
    if not enforcement:
        return "-"
    return f"{enforcement.get('cpu', 'none')},{enforcement.get('memory', '-')}"


def _usage(bound: Iterable[Document]) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
    """Per worker: the slots its CPU jobs take, and which job holds each GPU."""
    slots: dict[str, int] = {}
    holders: dict[str, dict[int, int]] = {}
    for job in bound:
        worker = _status(job).get("worker") or ""
        gpus = _status(job).get("gpus") or []
        if not (_spec(job).get("resources") or {}).get("gpus"):
            slots[worker] = slots.get(worker, 0) + 1  # a CPU job takes a slot, a GPU job none
        held = holders.setdefault(worker, {})
        held.update({int(g): int((job.get("metadata") or {}).get("id", 0)) for g in gpus})
    return slots, holders


def _worker_gpus(spec: Document, status: Document, held: Mapping[int, int], *, wide: bool) -> str:
    """`0:24GiB(7),1:80GiB(-)`: each GPU, its memory where known, and the job on it;
    wide adds the memory processes jobd did not start use on it."""
    from jobd.api.sizes import format_size

    memory = {int(g): int(m) for g, m in (spec.get("gpu_memory") or {}).items()}
    foreign = {int(g): int(m) for g, m in (status.get("gpu_memory_foreign") or {}).items()}
    cells = []
    for g in spec.get("gpus") or []:
        size = f":{format_size(memory[g])}" if g in memory else ""
        other = f",{format_size(foreign[g])} foreign" if wide and foreign.get(g) else ""
        cells.append(f"{g}{size}({held.get(g, '-')}{other})")
    return ",".join(cells) or "-"


def _worker_status(spec: Document, status: Document) -> str:
    """The phase, and `SchedulingDisabled` when cordoned, as kubectl shows a node."""
    phase = str(status.get("phase", "Ready"))
    return f"{phase},SchedulingDisabled" if spec.get("cordoned") else phase


# -- projects --------------------------------------------------------------------------------


def projects_table(
    projects: Iterable[Document], now: datetime | None = None, *, wide: bool = False
) -> PlainTable:
    """NAME PRIORITY PREEMPTIBLE GRACE AGE: what a project gives its jobs by default."""
    now = _now(now)
    table = _table("NAME", "PRIORITY", "PREEMPTIBLE", "GRACE", "AGE", *(["LABELS"] if wide else []))
    for project in projects:
        meta, spec = project.get("metadata") or {}, project.get("spec") or {}
        defaults = spec.get("defaults") or {}
        preemptible = defaults.get("preemptible")
        grace = defaults.get("checkpoint_grace_s")
        row = [
            str(meta.get("name", "?")),
            str(spec.get("priority", 0)),
            "-" if preemptible is None else str(preemptible).lower(),
            "-" if grace is None else f"{grace:g}s",
            _age(meta.get("created_at"), now),
        ]
        if wide:
            labels = meta.get("labels") or {}
            row.append(",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-")
        table.add_row(*row)
    return table


def status_table(jobs: Iterable[Document], now: datetime | None = None) -> PlainTable:
    """`job status -o wide`: the converging jobs with their names and workers."""
    now = _now(now)
    table = _table("ID", "NAME", "PHASE", "WORKER", "FOR", "WAITING FOR")
    for job in jobs:
        status = _status(job)
        since = status.get("stopping_at") or status.get("queued_at")
        row = [_id(job), _ref(job), phase_text(job), worker_text(status)]
        table.add_row(*row, _age(since, now), _why(status) or "-")
    return table


# -- documents -------------------------------------------------------------------------------


def to_json(docs: Any, *, compact: bool = False) -> str:
    """Documents as JSON: indented for reading, or one line each for streaming."""
    if compact:
        return json.dumps(docs, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(docs, indent=2, ensure_ascii=False)


def diff_text(
    live: Document | None, applied: Document, kind: str, name: str, action: str = ""
) -> str:
    """Unified diff of the live YAML against what apply would make; "" when they agree.

    `status` and the server's own metadata are left out: apply never writes them, and
    comparing them would show the job's progress between two requests as a difference.
    Secret env values read masked on both sides: an apply that would change only those
    (`action` configured, no line differs) is said in a comment line, values unshown.
    """
    import difflib

    from jobd.api.manifests import dump_yaml

    before = dump_yaml([_without_status(live)]) if live is not None else ""
    after = dump_yaml([_without_status(applied)])
    label = f"{kind.lower()}/{name}"
    lines = list(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"live/{label}",
            tofile=f"applied/{label}",
        )
    )
    if not lines and action == "configured":
        lines = [
            f"--- live/{label}\n",
            f"+++ applied/{label}\n",
            "# a secret env value changes (secret values are shown masked on both sides)\n",
        ]
    return "".join(lines)


_SERVER_METADATA = ("id", "uid", "generation", "resource_version", "created_at")


def _without_status(doc: Document) -> dict[str, Any]:
    """What a manifest says: no status, and none of the metadata the server keeps."""
    kept = {k: v for k, v in doc.items() if k != "status"}
    if isinstance(kept.get("metadata"), dict):
        meta = kept["metadata"]
        kept["metadata"] = {k: v for k, v in meta.items() if k not in _SERVER_METADATA}
    return kept
