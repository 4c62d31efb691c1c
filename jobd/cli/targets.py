"""Which jobs a verb acts on: ids, names as the CLI prints them, selectors, manifests.

Every name `job` prints can be given back: `7`, `job/7`, `PROJECT/NAME`, `job/NAME`,
`job/PROJECT/NAME`, or a bare NAME (the one job of that name, or the default project's
when several projects have one). A job array (`A12`, `array/NAME`, or a NAME no job has)
stands for each of its members. Verbs that act on jobs take several of them, a label
selector (`-l team=vision`, as kubectl) and the jobs a manifest names (`-f FILE`). As
kubectl does, a verb goes on past a job it cannot act on, says why, and exits 1 at the end.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from jobd.api.selectors import parse_selector
from jobd.api.vocabulary import DEFAULT_PROJECT, array_id_of
from jobd.cli.broker_client import ApiError, Document, JobdClient
from jobd.cli.failure import Failure, warn

__all__ = [
    "Selection",
    "array_or_none",
    "find_array",
    "is_array_ref",
    "job_targets",
    "resolve",
    "resolve_all",
    "strip_kind",
]

F = TypeVar("F", bound=Callable[..., Any])


def strip_kind(ref: str, kind: str) -> str:
    """`job/7` is `7`, `worker/box` is `box`: the kind prefix kubectl prints, dropped."""
    for prefix in (f"{kind}/", f"{kind}s/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref


def resolve(client: JobdClient, ref: str) -> int:
    """The id of `ref`: an id, `PROJECT/NAME` or NAME, with or without `job/` before it."""
    ref = strip_kind(ref, "job")
    if ref.isdigit():
        return int(ref)
    project, _, name = ref.rpartition("/")
    job = client.find_job(project or None, name)
    if job is None:
        where = f"in project {project!r}" if project else "in any project"
        raise Failure(f"no job named {name!r} {where}")
    return int(job["metadata"]["id"])


def is_array_ref(ref: str) -> bool:
    """`A12`, `array/NAME` or `array/PROJECT/NAME`: a ref that names a job array."""
    return array_id_of(ref) is not None or strip_kind(ref, "array") != ref


def find_array(client: JobdClient, ref: str) -> Document | None:
    """The array `ref` names (`A12`, `[array/][PROJECT/]NAME`), None when none has it."""
    array_id = array_id_of(ref)
    if array_id is not None:
        return client.get_array(array_id)
    project, _, name = strip_kind(ref, "array").rpartition("/")
    return client.find_array(project or None, name)


def array_or_none(client: JobdClient, ref: str) -> Document | None:
    """The array of that name; None also from a broker that knows no arrays (older)."""
    try:
        return find_array(client, ref)
    except ApiError:
        return None


def resolve_all(client: JobdClient, ref: str) -> list[int]:
    """The ids `ref` names: a job's (as `resolve`), or each member of the array it names,
    by `A12`, `array/NAME`, or a NAME no job has."""
    if not is_array_ref(ref):
        try:
            return [resolve(client, ref)]
        except Failure as not_a_job:
            if ref.isdigit() or strip_kind(ref, "job") != ref:
                raise
            array = array_or_none(client, ref)
            if array is None:
                raise not_a_job from None
    else:
        array = find_array(client, ref)
        if array is None:
            raise Failure(f"no array named {strip_kind(ref, 'array')!r}")
    return [int(m["id"]) for m in array["status"]["members"]]


class Selection:
    """The jobs a verb was pointed at, and whether acting on any of them failed."""

    def __init__(
        self,
        refs: tuple[str, ...] = (),
        selector: str | None = None,
        project: str | None = None,
        files: tuple[str, ...] = (),
    ) -> None:
        self.refs, self.selector, self.project, self.files = refs, selector, project, files
        self.failed = 0

    @property
    def single(self) -> bool:
        """One job named by itself: `-o json` prints it as a document, not a list."""
        single = len(self.refs) == 1 and not self.selector and not self.files
        return single and not is_array_ref(self.refs[0])

    def ids(self, client: JobdClient) -> Iterator[int]:
        """Each job's id once, in the order given; a ref that fails is said and counted."""
        seen: set[int] = set()
        for lookup in self._lookups(client):
            try:
                found = lookup()
            except (ApiError, Failure) as exc:
                self.fail(exc.message)
                continue
            for job_id in found:
                if job_id not in seen:
                    seen.add(job_id)
                    yield job_id

    def each(self, client: JobdClient, act: Callable[[int], None]) -> None:
        """`act` on every job; a refusal is said and counted, and the next job is tried."""
        for job_id in self.ids(client):
            try:
                act(job_id)
            except ApiError as exc:
                self.fail(exc.message)

    def fail(self, message: str) -> None:
        warn(f"error: {message}")
        self.failed += 1

    def exit_if_failed(self) -> None:
        if self.failed:
            sys.exit(1)

    def _lookups(self, client: JobdClient) -> Iterator[Callable[[], list[int]]]:
        """A look-up per thing named, run one by one so a failing one stops no other."""
        for ref in self.refs:
            yield _by_name(client, ref)
        if self.files:
            yield from self._from_files(client)
        if self.selector:
            yield functools.partial(self._selected, client)

    def _selected(self, client: JobdClient) -> list[int]:
        jobs = client.list_jobs(project=self.project, selector=self.selector).items
        if not jobs:
            where = f" in project {self.project!r}" if self.project else ""
            warn(f"No jobs match -l {self.selector}{where}.")
        return [int(j["metadata"]["id"]) for j in jobs]

    def _from_files(self, client: JobdClient) -> Iterator[Callable[[], list[int]]]:
        from jobd.cli.manifest_files import load_manifests

        for doc in load_manifests(self.files):
            meta = doc.get("metadata") or {}
            kind, name = doc.get("kind"), meta.get("name")
            if kind not in ("Job", "JobArray"):
                warn(f"note: {str(kind).lower()}/{name}: not a job, left alone")
            elif not name:
                warn(f"note: a {kind} without metadata.name names nothing stored, left alone")
            else:
                prefix = "array/" if kind == "JobArray" else ""
                ref = f"{prefix}{meta.get('project') or DEFAULT_PROJECT}/{name}"
                yield _by_name(client, ref)


def _by_name(client: JobdClient, ref: str) -> Callable[[], list[int]]:
    return lambda: resolve_all(client, ref)


def job_targets(f: F) -> F:
    """The options of a verb acting on jobs; the verb gets them as `targets` (a Selection)."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        refs: tuple[str, ...],
        selector: str | None,
        project: str | None,
        files: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        if not (refs or selector or files):
            raise click.UsageError("say which jobs: ID or PROJECT/NAME, -l KEY=VALUE, or -f FILE")
        if selector is not None:
            try:
                parse_selector(selector)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="-l") from None
        if project is not None and not selector:
            raise click.UsageError("-p PROJECT goes with -l: name the jobs in it by label")
        targets = Selection(refs, selector, project, files)
        return f(*args, targets=targets, **kwargs)

    decorators = [
        click.argument("refs", nargs=-1, metavar="[ID|PROJECT/NAME]..."),
        click.option(
            "-l",
            "--selector",
            metavar="KEY=VALUE[,...]",
            help="The jobs with these labels (KEY=VALUE, KEY!=VALUE, KEY, !KEY; comma: and).",
        ),
        click.option("-p", "--project", help="With -l: only the jobs of this project."),
        click.option(
            "-f",
            "--filename",
            "files",
            multiple=True,
            metavar="FILE",
            help="The jobs a manifest (or a directory of them) names; repeatable.",
        ),
    ]
    command: Any = wrapper
    for decorator in reversed(decorators):
        command = decorator(command)
    return command  # type: ignore[no-any-return]
