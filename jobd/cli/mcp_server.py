"""`jobd mcp`: the broker's jobs as MCP tools, so an LLM agent can run and babysit them.

The server speaks MCP on stdio (the official `mcp` SDK, the optional extra `jobd[mcp]`)
and is one more client of the broker, like `job`: every tool is a call or a few of the
CLI's `JobdClient`, with the token `job` would send. So the broker alone decides what the
agent may see and do — a user token scoped to a project sees that project's jobs here
exactly as through `job`, and secrets come back masked as the broker sends them.

Answers are JSON objects; a refusal (the broker's 4xx, a job not found, bad arguments)
is a tool error carrying the broker's sentence, never a traceback. Output is bounded
(`max_bytes`, `limit`) so a huge log cannot flood the agent's context.
Next stage: `jobd.cli.broker_client.JobdClient`, then the broker's routes.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from jobd.api.models import Phase
from jobd.cli.broker_client import ApiError, BrokerUnreachable, JobdClient
from jobd.cli.failure import Failure
from jobd.cli.mcp_parameters import said_by_parameters, with_spec_parameters
from jobd.cli.submit import SPEC_OPTIONS, FieldPath, SubmitError, job_document
from jobd.cli.targets import resolve

__all__ = ["JobTools", "build_server"]

Document = dict[str, Any]

_INSTRUCTIONS = (
    "Tools for a jobd broker, a job scheduler for GPU machines. Jobs are argv commands "
    "that go Pending -> Scheduled -> Running -> Succeeded|Failed; preemption ends in "
    "Preempted (resume_job runs it again from its checkpoint), cancel in Cancelled. "
    "A job is named by its integer id, PROJECT/NAME, or a NAME."
)
# A read of the broker returns up to 1 MiB; a tail over more than this many is cut short.
_MAX_LOG_READS = 16

JobRef = Annotated[str, Field(description="The job: its integer id, PROJECT/NAME, or a bare NAME.")]


@contextmanager
def _as_tool_errors() -> Iterator[None]:
    """What the broker or the arguments refuse, as the tool error an agent reads."""
    try:
        yield
    except (ApiError, BrokerUnreachable, Failure) as exc:
        raise ToolError(exc.message) from None
    except SubmitError as exc:
        raise ToolError(str(exc)) from None


# What each field of a submitted Job is called here, so a refusal names the parameter.
_PARAMETERS: dict[FieldPath, str] = {
    ("metadata", "name"): "name",
    ("metadata", "project"): "project",
    ("spec", "command"): "command",
    ("spec", "cwd"): "cwd",
    **{("spec", *spec.path): spec.parameter for spec in SPEC_OPTIONS},
}


def job_summary(job: Document) -> Document:
    """The fields an agent scans a list for; get_job gives the whole document."""
    meta, spec, status = (job.get(k) or {} for k in ("metadata", "spec", "status"))
    return {
        "id": meta.get("id"),
        "name": meta.get("name"),
        "project": meta.get("project"),
        "phase": status.get("phase"),
        "desired_phase": status.get("desired_phase"),
        "worker": status.get("worker"),
        "exit_code": status.get("exit_code"),
        "command": spec.get("command"),
        "created_at": meta.get("created_at"),
        "finished_at": status.get("finished_at"),
    }


class JobTools:
    """The tools, each one or a few calls of one client of the broker."""

    def __init__(self, broker: JobdClient) -> None:
        self.broker = broker

    def _id(self, job: str) -> int:
        return resolve(self.broker, job.strip())

    def submit_job(
        self,
        command: Annotated[
            list[str], Field(description="argv to run, never through a shell", min_length=1)
        ],
        project: Annotated[str, Field(description="The job's project.")] = "default",
        name: Annotated[
            str | None, Field(description="Unique in its project; generated when omitted.")
        ] = None,
        cwd: Annotated[
            str | None, Field(description="Working directory; the MCP server's when omitted.")
        ] = None,
        # The spec's fields, a parameter each in the tool's signature (with_spec_parameters).
        **fields: Any,
    ) -> Document:
        """Submit a job (as `job submit`); returns its document, with its id."""
        with _as_tool_errors():
            said = said_by_parameters(fields)
            where = os.path.abspath(os.path.expanduser(cwd or os.getcwd()))
            document = job_document(command, where, project, name, said, _PARAMETERS)
            return self.broker.create_job(document)

    def get_job(self, job: JobRef) -> Document:
        """One job's whole document: spec, status, conditions, progress."""
        with _as_tool_errors():
            return self.broker.get_job(self._id(job))

    def explain_job(self, job: JobRef) -> Document:
        """Why a job is not running (as `job explain`): for a Pending job its reason, each
        worker's verdict (what it lacks and by how much), its place in the queue, the jobs
        it depends on, its retry backoff, its array's cap, and what preemption could free;
        for any other job its phase and why. Each finding has a `says` sentence."""
        with _as_tool_errors():
            return self.broker.explain_job(self._id(job))

    def list_jobs(
        self,
        project: Annotated[str | None, Field(description="Only this project's jobs.")] = None,
        phase: Annotated[
            list[Phase] | None, Field(description="Only jobs in these phases.")
        ] = None,
        selector: Annotated[
            str | None, Field(description="Label selector, e.g. team=vision,size!=xl.")
        ] = None,
        limit: Annotated[int, Field(description="At most this many jobs.", ge=1, le=500)] = 50,
    ) -> Document:
        """Jobs, one summary each (id, name, project, phase, worker, exit code ...)."""
        with _as_tool_errors():
            listing = self.broker.list_jobs(
                project=project,
                phase=[p.value for p in phase or ()],
                selector=selector,
                limit=limit,
            )
        return {"items": [job_summary(j) for j in listing.items], "count": len(listing.items)}

    def job_logs(
        self,
        job: JobRef,
        tail_lines: Annotated[
            int, Field(description="Start at the last N lines of output.", ge=0)
        ] = 100,
        offset: Annotated[
            int | None,
            Field(description="Read on from this byte offset (a former next_offset).", ge=0),
        ] = None,
        max_bytes: Annotated[
            int, Field(description="At most this many bytes of text.", ge=1, le=1 << 20)
        ] = 16_384,
        rank: Annotated[
            int | None,
            Field(
                description="One member of a multi-host job, alone (without: every "
                "member's lines interleaved, each behind [rank N]).",
                ge=0,
            ),
        ] = None,
    ) -> Document:
        """The job's output (stdout and stderr as the job wrote them). Without offset: the
        newest lines, cut to the newest max_bytes. With offset: the bytes from there, cut to
        the first max_bytes; pass next_offset back to read on (with the same rank)."""
        with _as_tool_errors():
            job_id = self._id(job)
            if offset is not None:
                return self._logs_from(job_id, offset, max_bytes, rank)
            return self._logs_tail(job_id, tail_lines, max_bytes, rank)

    def _logs_from(self, job_id: int, offset: int, max_bytes: int, rank: int | None) -> Document:
        chunk = self.broker.read_logs(job_id, offset=offset, rank=rank)
        cut = len(chunk.data) > max_bytes
        next_offset = offset + max_bytes if cut else chunk.offset
        return _log_answer(chunk.data[:max_bytes], next_offset, chunk.done and not cut, cut)

    def _logs_tail(
        self, job_id: int, tail_lines: int, max_bytes: int, rank: int | None
    ) -> Document:
        chunk = self.broker.read_logs(job_id, tail=tail_lines, rank=rank)
        newest, size = deque([chunk.data]), len(chunk.data)
        for _ in range(_MAX_LOG_READS - 1):
            if not chunk.data:
                break
            chunk = self.broker.read_logs(job_id, offset=chunk.offset, rank=rank)
            newest.append(chunk.data)
            size += len(chunk.data)
        data = b"".join(newest)
        cut = size > max_bytes or bool(chunk.data)
        return _log_answer(data[-max_bytes:], chunk.offset, chunk.done, cut)

    def job_events(
        self,
        job: Annotated[str | None, Field(description="Only this job's events.")] = None,
        event_type: Annotated[
            str | None, Field(description="Only this event, e.g. job_finished.")
        ] = None,
        limit: Annotated[int, Field(description="The newest this many.", ge=1, le=1000)] = 50,
    ) -> Document:
        """Events (as in events.jsonl), oldest first: the newest `limit` of them."""
        with _as_tool_errors():
            job_id = None if job is None else self._id(job)
            newest = self._newest_events(job_id, event_type, limit)
        return {"items": newest, "count": len(newest)}

    def _newest_events(self, job_id: int | None, event_type: str | None, limit: int) -> list[Any]:
        """The newest `limit` matching events, without reading a long history from its start:
        look back over a window of sequence numbers, widened until it holds enough."""
        end = self.broker.events(from_now=True).last or 0
        window = limit
        while True:
            start = max(0, end - window)
            found = list(self._events_between(job_id, event_type, start, end))
            if len(found) >= limit or start == 0:
                return found[-limit:]
            window *= 4

    def _events_between(
        self, job_id: int | None, event_type: str | None, start: int, end: int
    ) -> Iterator[Document]:
        after = start
        while page := self.broker.events(job=job_id, event_type=event_type, after=after).items:
            yield from (e for e in page if e["seq"] <= end)
            if page[-1]["seq"] >= end:
                return
            after = page[-1]["seq"]

    def cancel_job(self, job: JobRef) -> Document:
        """Stop a job (as `job cancel`): Cancelling, then Cancelled."""
        return self._act(job, JobdClient.cancel_job)

    def preempt_job(self, job: JobRef) -> Document:
        """Preempt a running job (as `job preempt`): SIGTERM, its grace, then Preempted."""
        return self._act(job, JobdClient.preempt_job)

    def resume_job(
        self,
        job: JobRef,
        from_scratch: Annotated[
            bool,
            Field(description="Run it again without RESUME_FROM (it never checkpointed)."),
        ] = False,
        force: Annotated[
            bool,
            Field(description="Point RESUME_FROM at its checkpoint directory anyway."),
        ] = False,
    ) -> Document:
        """Run a preempted job again as a new job with RESUME_FROM at its checkpoint.

        Refused for a job that never completed a checkpoint unless from_scratch or force."""
        with _as_tool_errors():
            return self.broker.resume_job(self._id(job), from_scratch=from_scratch, force=force)

    def _act(self, job: str, verb: Callable[[JobdClient, int], Document]) -> Document:
        with _as_tool_errors():
            return verb(self.broker, self._id(job))

    def list_workers(self) -> Document:
        """The workers: capacity, lease, cordoned or not, their jobs."""
        with _as_tool_errors():
            workers = self.broker.list_workers()
        return {"items": workers, "count": len(workers)}


def _log_answer(data: bytes, next_offset: int, done: bool, truncated: bool) -> Document:
    return {
        "text": data.decode("utf-8", errors="replace"),
        "next_offset": next_offset,
        "job_done": done,
        "truncated": truncated,
    }


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_STOPS = ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False)
_MAKES = ToolAnnotations(destructive_hint=False, open_world_hint=False)


def build_server(broker: JobdClient) -> MCPServer:
    """An MCP server whose tools act through `broker` (a client holding the caller's token)."""
    # Warnings only on stderr: a refused call is already told to the agent, as a tool error.
    server = MCPServer(
        "jobd", version=version("jobd"), instructions=_INSTRUCTIONS, log_level="WARNING"
    )
    tools = JobTools(broker)
    hinted: list[tuple[Callable[..., Document], ToolAnnotations]] = [
        (with_spec_parameters(tools.submit_job), _MAKES),
        (tools.get_job, _READ),
        (tools.explain_job, _READ),
        (tools.list_jobs, _READ),
        (tools.job_logs, _READ),
        (tools.job_events, _READ),
        (tools.cancel_job, _STOPS),
        (tools.preempt_job, _STOPS),
        (tools.resume_job, _MAKES),
        (tools.list_workers, _READ),
    ]
    for tool, hints in hinted:
        server.add_tool(tool, annotations=hints, structured_output=True)
    return server
