"""The job state machine under random verbs, reports and loop decisions (Hypothesis).

A `RuleBasedStateMachine` holds a few jobs as the store would (each move written only
when the transition returns a new job) and drives them through the pure functions of
transitions.py: binds and unbinds, leases lost and workers returning, cancel and
preempt, the loops' timeouts, and worker reports from the right and the wrong worker,
of the current, an old or a future attempt, delivered at once or held back and
delivered later, out of order, and more than once. Against a model of each job (its
phase once ended, its run, its events) it checks after every step that:

- no job ever leaves a terminal phase, and each ended job has exactly one
  `job_finished` event (none before it ends);
- a report of another attempt, or from a worker the job is not bound to, is refused
  and changes nothing;
- every move stays within what the table allows for its verb;
- the attempt grows by one with each bind, and only then;
- a job with a retry policy goes back to the queue no more often than its limit, each
  time with one `job_retrying` event, and is queued only once its backoff is over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jobd.api.models import (
    BOUND_PHASES,
    TERMINAL_PHASES,
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    RetryPolicy,
)
from jobd.controllers import transitions
from jobd.controllers.errors import TransitionError
from jobd.controllers.transition_table import TABLE, Verb
from jobd.store.base import EventRecord

P = Phase
WORKERS = ("a", "b")
MAX_JOBS = 3
STARTED = (P.RUNNING, P.PREEMPTING, P.CANCELLING)
REPORTS = (Verb.STARTED, Verb.STOPPING, Verb.COMPLETE, Verb.CHECKPOINT_COMPLETE)
T0 = datetime(2026, 1, 1, tzinfo=UTC)

Move = tuple[Job, list[EventRecord]]


@dataclass(frozen=True)
class Sent:
    """A report as a worker made it: about which job, which run, from whom."""

    job: int
    verb: Verb
    worker: str
    attempt: int | None
    exit_code: int | None = 0


@dataclass
class Model:
    """What the test knows of one job, independently of the job document."""

    ended: Phase | None = None
    attempt: int = 0
    finished_events: int = 0
    cancelled_events: int = 0
    retrying_events: int = 0


@dataclass
class Cluster:
    jobs: dict[int, Job] = field(default_factory=dict)
    models: dict[int, Model] = field(default_factory=dict)


def _report(job: Job, sent: Sent, now: datetime) -> Move:
    worker, attempt = sent.worker, sent.attempt
    if sent.verb == Verb.STARTED:
        return transitions.start(job, worker, now, attempt)
    if sent.verb == Verb.STOPPING:
        return transitions.stopping(job, worker, now, attempt)
    if sent.verb == Verb.COMPLETE:
        return transitions.complete(job, worker, sent.exit_code, None, now, attempt)
    return transitions.checkpoint_complete(job, worker, now, attempt)


class JobStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster()
        self.in_flight: list[Sent] = []  # reports sent and not yet (or again) delivered
        self.now = T0

    # -- helpers -------------------------------------------------------------------------

    def _tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def _apply(self, job_id: int, verb: Verb, move: Callable[[Job], Move]) -> bool:
        """Write what `move` makes of the job, as its caller would; False if refused."""
        old = self.cluster.jobs[job_id]
        before = old.model_dump()
        try:
            new, events = move(old)
        except TransitionError:
            assert old.model_dump() == before, "a refused move changed its input"
            return False
        assert old.model_dump() == before, "a move changed its input instead of a copy"
        if new is old:
            assert events == [], "a move that writes nothing justifies no event"
            return True
        assert new.status.phase in TABLE[verb].moves[old.status.phase], (verb, old.status.phase)
        self._record(old, new, events)
        self.cluster.jobs[job_id] = new
        return True

    def _record(self, old: Job, new: Job, events: list[EventRecord]) -> None:
        model = self.cluster.models[new.id]
        assert model.ended is None, f"job {new.id} left {model.ended} for {new.status.phase}"
        if new.status.attempt != old.status.attempt:
            assert new.status.phase == P.SCHEDULED, "only a bind starts a new run"
            assert new.status.attempt == old.status.attempt + 1
            model.attempt = new.status.attempt
        for event in events:
            assert event.job == new.id
            model.finished_events += event.event == "job_finished"
            model.cancelled_events += event.event == "job_cancelled"
            model.retrying_events += event.event == "job_retrying"
        if new.status.phase in TERMINAL_PHASES:
            model.ended = new.status.phase

    def _job(self, index: int) -> Job | None:
        ids = sorted(self.cluster.jobs)
        return self.cluster.jobs[ids[index % len(ids)]] if ids else None

    # -- users and loops ------------------------------------------------------------------

    @precondition(lambda self: len(self.cluster.jobs) < MAX_JOBS)
    @rule(retries=st.sampled_from([None, 0, 1, 2]), on_lost=st.booleans())
    def submit(self, retries: int | None, on_lost: bool) -> None:
        job_id = len(self.cluster.jobs) + 1
        policy = None if retries is None else RetryPolicy(limit=retries, on_lost=on_lost)
        spec = JobSpec(command=["x"], retry=policy)
        job = Job(metadata=ObjectMeta(id=job_id, name=f"j{job_id}"), spec=spec)
        self.cluster.jobs[job_id] = job
        self.cluster.models[job_id] = Model()

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1), worker=st.sampled_from(WORKERS))
    def bind(self, index: int, worker: str) -> None:
        job = self._job(index)
        assert job is not None
        # The scheduler reads only ready jobs: none waits out a retry's backoff.
        if job.status.phase == P.PENDING and job.status.retry_at is None:
            self._apply(job.id, Verb.BIND, lambda j: transitions.bind(j, worker, [], self._tick()))

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1))
    def lease_expires(self, index: int) -> None:
        """The workers loop: a Scheduled job goes back to the queue, a started one is Lost."""
        job = self._job(index)
        assert job is not None
        if job.status.phase == P.SCHEDULED:
            self._apply(job.id, Verb.UNBIND, transitions.unbind)
        elif job.status.phase in STARTED:
            self._apply(job.id, Verb.LOSE, lambda j: transitions.lose(j, self._tick()))

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1))
    def lost_timeout(self, index: int) -> None:
        job = self._job(index)
        assert job is not None
        if job.status.phase == P.LOST:
            move = lambda j: transitions.lost_timeout(j, self._tick())  # noqa: E731
            self._apply(job.id, Verb.LOST_TIMEOUT, move)

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1))
    def process_vanished(self, index: int) -> None:
        job = self._job(index)
        assert job is not None
        if job.status.phase in (*STARTED, P.LOST):
            move = lambda j: transitions.process_vanished(j, self._tick())  # noqa: E731
            self._apply(job.id, Verb.PROCESS_VANISHED, move)

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1), early=st.booleans())
    def backoff_over(self, index: int, early: bool) -> None:
        """The retries loop: a retried job joins the queue once its wait is over."""
        job = self._job(index)
        assert job is not None
        if job.status.phase == P.PENDING and job.status.retry_at is not None:
            at = job.status.retry_at if not early else self.now
            if at < job.status.retry_at:
                return  # the loop's timer has not run out: it does nothing yet
            self._apply(job.id, Verb.RETRY_READY, lambda j: transitions.retry_ready(j, at))

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1))
    def cancel(self, index: int) -> None:
        job = self._job(index)
        assert job is not None
        self._apply(job.id, Verb.CANCEL, lambda j: transitions.cancel(j, self._tick()))

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1))
    def preempt(self, index: int) -> None:
        job = self._job(index)
        assert job is not None
        move = lambda j: transitions.request_preemption(j, self._tick(), "manual")  # noqa: E731
        self._apply(job.id, Verb.PREEMPT, move)

    # -- workers' reports -------------------------------------------------------------------

    @precondition(lambda self: self.cluster.jobs)
    @rule(
        index=st.integers(0, MAX_JOBS - 1),
        verb=st.sampled_from(REPORTS),
        right_worker=st.booleans(),
        attempt_shift=st.sampled_from([0, 0, 0, -1, 1, None]),
        exit_code=st.sampled_from([0, 1]),
        now=st.booleans(),
    )
    def report(
        self,
        index: int,
        verb: Verb,
        right_worker: bool,
        attempt_shift: int | None,
        exit_code: int,
        now: bool,
    ) -> None:
        """A worker reports on a job: delivered now, or held back to arrive later."""
        job = self._job(index)
        assert job is not None
        bound = job.status.worker or WORKERS[0]
        worker = bound if right_worker else next(w for w in WORKERS if w != bound)
        attempt = None if attempt_shift is None else job.status.attempt + attempt_shift
        sent = Sent(job.id, verb, worker, attempt, exit_code)
        if now:
            self._deliver(sent)
        else:
            self.in_flight.append(sent)

    @precondition(lambda self: self.cluster.jobs)
    @rule(index=st.integers(0, MAX_JOBS - 1), exit_code=st.sampled_from([1, 2]))
    def run_fails(self, index: int, exit_code: int) -> None:
        """The bound run's workload fails, reported by its worker (retried, or not)."""
        job = self._job(index)
        assert job is not None
        if job.status.worker is not None and not job.status.phase.terminal:
            sent = Sent(job.id, Verb.COMPLETE, job.status.worker, job.status.attempt, exit_code)
            self._deliver(sent)
            if exit_code == 1:
                self.in_flight.append(sent)  # and once more, late: fenced off by then

    @precondition(lambda self: self.in_flight)
    @rule(pick=st.integers(0, 1_000), again=st.booleans())
    def deliver_late(self, pick: int, again: bool) -> None:
        """A held report arrives, out of order; `again`: it will arrive once more (a retry)."""
        sent = self.in_flight[pick % len(self.in_flight)]
        if not again:
            self.in_flight.remove(sent)
        self._deliver(sent)

    def _deliver(self, sent: Sent) -> None:
        job = self.cluster.jobs[sent.job]
        stale = job.status.worker != sent.worker or (
            sent.attempt is not None and sent.attempt != job.status.attempt
        )
        accepted = self._apply(sent.job, sent.verb, lambda j: _report(j, sent, self._tick()))
        if stale:
            assert not accepted, f"a stale report was taken: {sent} on {job.status}"

    # -- what must always hold --------------------------------------------------------------

    @invariant()
    def ended_jobs_stay_ended_with_one_finish(self) -> None:
        for job_id, job in self.cluster.jobs.items():
            model = self.cluster.models[job_id]
            if model.ended is not None:
                assert job.status.phase == model.ended
                assert model.finished_events == 1, f"job {job_id}: {model.finished_events}"
            else:
                assert job.status.phase not in TERMINAL_PHASES
                assert model.finished_events == 0
            assert model.cancelled_events <= 1
            assert job.status.attempt == model.attempt

    @invariant()
    def retries_stay_within_the_limit_one_event_each(self) -> None:
        for job_id, job in self.cluster.jobs.items():
            model, policy = self.cluster.models[job_id], job.spec.retry
            assert job.status.retries == model.retrying_events
            assert job.status.retries <= (policy.limit if policy else 0)
            if job.status.retry_at is not None:
                assert job.status.phase == P.PENDING and job.status.worker is None

    @invariant()
    def bound_jobs_have_a_worker_and_queued_ones_none(self) -> None:
        for job in self.cluster.jobs.values():
            if job.status.phase in BOUND_PHASES:
                assert job.status.worker in WORKERS
            if job.status.phase == P.PENDING:
                assert job.status.worker is None


JobStateMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_job_state_machine = JobStateMachine.TestCase
