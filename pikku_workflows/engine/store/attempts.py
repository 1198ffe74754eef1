"""Steps and their attempts: the status moves of a step outside the pass's checkpoint."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from ...mirror import changing
from ...models import StepAttempt, WorkflowRun, WorkflowStep
from ...signals import send_step_event, step_failed, step_retried, step_succeeded
from ...status import RunStatus, StepStatus
from ...types import RunId, UserJSON
from ..batching import Batch
from ..clock import clock
from .backends import LeasedRun, attempt_succeeded_fields, backend, step_succeeded_fields
from .errors import stale
from .rows import unsaved, waiting_for
from .runs import lease_until, run_uuid
from .unit_of_work import UnitOfWork, flush, writing


def new_step(run_id: RunId, key: str, **fields: Any) -> WorkflowStep:
    """An unsaved step row; ``UnitOfWork.begin_attempt`` inserts it with its first attempt."""
    return unsaved(WorkflowStep, run_id=run_id, step_name=key, status=StepStatus.PENDING,
                   **fields)


def last_attempt(step: WorkflowStep) -> StepAttempt | None:
    return StepAttempt.objects.filter(step=step, attempt=step.attempt_count).first()


def _assign(row: WorkflowStep | StepAttempt, fields: dict[str, Any]) -> None:
    """Give an in-memory row the fields its write gives the database row."""
    for name, value in fields.items():
        setattr(row, name, value)


def _save_attempt(attempt: StepAttempt, *fields: str) -> None:
    if attempt.pk is None:
        attempt.save(force_insert=True)
    else:
        StepAttempt.objects.filter(pk=attempt.pk).update(
            **{name: getattr(attempt, name) for name in fields}
        )


def _step_row(step: WorkflowStep, attempt: StepAttempt | None, guard: bool
              ) -> QuerySet[WorkflowStep]:
    """The step row to update; with ``guard``, only while ``attempt`` is still current."""
    rows = WorkflowStep.objects.filter(pk=step.pk)
    if guard and attempt is not None:
        rows = rows.filter(status=StepStatus.RUNNING, attempt_count=attempt.attempt)
    return rows


def record_success(step: WorkflowStep, attempt: StepAttempt | None, result: UserJSON, *,
                   work: UnitOfWork | None = None, defer: bool = False, guard: bool = False,
                   lease_to: str | None = None) -> LeasedRun | None:
    """Store a step's result; with ``work`` and ``defer``, leave the write to the pass's
    next write (``UnitOfWork.defer_outcome``).

    ``lease_to`` (a step worker about to carry the run on): where the database allows,
    the same statement also leases the run to this owner if ``take_lease(...,
    unless_in_flight=True)`` would.

    Returns:
        The run leased that way (None: not leased, the caller takes the lease itself).

    Raises:
        StaleAttemptError: With ``guard``, the attempt is no longer the current one.
    """
    now = clock().now()
    _assign(step, step_succeeded_fields(result, now))
    if attempt is not None:
        _assign(attempt, attempt_succeeded_fields(result, now))
        if defer and work is not None and attempt.pk is None:
            work.defer_outcome(step, attempt)
            return None
        if guard and attempt.pk is not None:
            return _record_queued_success(step, attempt, result, now, work, lease_to)
    with changing("run", step.run_id), writing(work, 2 if attempt is not None else 1):
        flush(work)
        if not _step_row(step, attempt, guard).update(**step_succeeded_fields(result, now)):
            raise stale(step)
        if attempt is not None:
            _save_attempt(attempt, "status", "result", "succeeded_at")
    if step_succeeded.receivers:
        send_step_event(step_succeeded, step, attempt, finished_at=now)
    return None


def _record_queued_success(step: WorkflowStep, attempt: StepAttempt, result: UserJSON,
                           now: datetime, work: UnitOfWork | None, lease_to: str | None
                           ) -> LeasedRun | None:
    """A queued step's success: guarded by its attempt, whose row exists. With
    ``lease_to``, the run is leased in the same write unless a transaction of the
    caller's is open (its commit must come before the lease is looked at)."""
    lease = lease_to is not None and not connection.in_atomic_block and \
        not (work is not None and work.pending)
    leased = None
    with changing("run", step.run_id), writing(work):
        flush(work)
        if lease:
            recorded, leased = backend().record_success_and_lease(
                step.pk, attempt.attempt, result, now, run_uuid(step.run_id),
                str(lease_to), lease_until(now))
        else:
            recorded = backend().record_success(step.pk, attempt.attempt, result, now)
    if not recorded:
        raise stale(step)
    if step_succeeded.receivers:
        send_step_event(step_succeeded, step, attempt, finished_at=now)
    return leased


def record_failure(
    step: WorkflowStep, attempt: StepAttempt | None, error: dict[str, Any], *, retrying: bool,
    wake_at: datetime | None = None, status: str = StepStatus.FAILED, guard: bool = False,
    work: UnitOfWork | None = None,
) -> None:
    """Store a failed attempt; ``wake_at`` is when the next attempt may start.

    ``retrying``: another attempt will follow (``step_retried``), else the step failed
    terminally (``step_failed``). ``status`` is ``scheduled`` when a step worker has
    already re-dispatched the retry.
    """
    now = clock().now()
    # A step that waited for a named limit waits no more (only such a step has the
    # columns written: an older schema has none, tests/unit/test_upgrades.py).
    waited = {"waiting_for_limit": "", "waiting_since": None} \
        if waiting_for(step) else {}
    with changing("run", step.run_id), writing(work, 2 if attempt is not None else 1):
        flush(work)
        if not _step_row(step, attempt, guard).update(
            status=status, result=None, error=error, wake_at=wake_at, updated_at=now,
            lease_expires_at=None, **waited,
        ):
            raise stale(step)
        if attempt is not None:
            attempt.status, attempt.error, attempt.failed_at = StepStatus.FAILED, error, now
            _save_attempt(attempt, "status", "error", "failed_at")
    step.status, step.result, step.error, step.wake_at = status, None, error, wake_at
    if waited:
        step.waiting_for_limit, step.waiting_since = "", None
    signal = step_retried if retrying else step_failed
    if signal.receivers:
        extra = {"wake_at": wake_at} if retrying else {}
        send_step_event(signal, step, attempt, finished_at=now, error=error, **extra)


def fail_lost_attempt(step: WorkflowStep, *, retrying: bool,
                      work: UnitOfWork | None = None) -> None:
    """A step left ``running`` by a pass that died: its last attempt counts as failed."""
    error = {"message": "the process running this attempt was lost", "type": "WorkerLost"}
    attempt = last_attempt(step) or StepAttempt(
        step=step, attempt=step.attempt_count, created_at=step.updated_at,
        running_at=step.updated_at,
    )
    record_failure(step, attempt, error, retrying=retrying, work=work)


def requeue_failed(step: WorkflowStep, work: UnitOfWork | None = None) -> None:
    """A failed (not exhausted) queued step goes back to ``pending`` for its next attempt."""
    flush(work)
    WorkflowStep.objects.filter(pk=step.pk, status=StepStatus.FAILED).update(
        status=StepStatus.PENDING, updated_at=clock().now()
    )
    step.status = StepStatus.PENDING


def set_branch(run_id: RunId, step_name: str, key: str, work: UnitOfWork | None = None) -> None:
    """Record the branch a graph node chose."""
    flush(work)
    with changing("run", run_id):
        WorkflowStep.objects.filter(run__pk=run_id, step_name=step_name).update(
            branch_taken=key)


def leave_pending(step: WorkflowStep) -> bool:
    """A claimable (pending or scheduled) step goes back to ``pending``; False if it was
    not claimable (a stale job)."""
    return bool(WorkflowStep.objects.filter(
        pk=step.pk, status__in=(StepStatus.PENDING, StepStatus.SCHEDULED)
    ).update(status=StepStatus.PENDING))


def open_suspend_gate(run_id: RunId, step_name: str, data: UserJSON) -> WorkflowStep | None:
    """The suspended step ``step_name`` succeeds with ``data``; the step, or None if it
    was not suspended."""
    with changing("run", run_id):
        opened = WorkflowStep.objects.filter(
            run__pk=run_id, step_name=step_name, status=StepStatus.SUSPENDED
        ).update(**step_succeeded_fields(data, clock().now()))
    if not opened:
        return None
    return WorkflowStep.objects.get(run__pk=run_id, step_name=step_name)


# --- queued steps: dispatch, claim, lease ---------------------------------------------------


def mark_dispatched(step: WorkflowStep) -> None:
    """A queued step's job reached the transport: ``pending`` becomes ``scheduled``."""
    if not _marks.add(step):
        _mark_scheduled([step])


def _mark_scheduled(steps: list[WorkflowStep]) -> None:
    with changing("run", *(step.run_id for step in steps)):
        WorkflowStep.objects.filter(
            pk__in=[step.pk for step in steps], status=StepStatus.PENDING
        ).update(status=StepStatus.SCHEDULED, updated_at=clock().now())


# The transport's acknowledgements, not a pass's writes: a job sender that sends many jobs
# at once (the rq executor's pipeline) runs their ``on_sent`` callbacks in this block, and
# their ``mark_dispatched`` calls become one UPDATE at its end.
_marks = Batch(_mark_scheduled)
batched_marks = _marks.collecting


def claim_step(step: WorkflowStep) -> StepAttempt | None:
    """Take a queued step for this worker: one status-guarded UPDATE decides the winner.

    Returns:
        The new attempt, or None if the step was not claimable (a duplicate or late job).
    """
    now = clock().now()
    scheduled_at = step.updated_at if step.status == StepStatus.SCHEDULED else None
    with changing("run", step.run_id):
        claimed = backend().claim_step(step.pk, now, lease_until(now), scheduled_at)
    if claimed is None:
        return None
    step.attempt_count, step.status = claimed[1], StepStatus.RUNNING
    attempt = StepAttempt(pk=claimed[0], step=step, attempt=claimed[1],
                          status=StepStatus.RUNNING, created_at=scheduled_at or now,
                          scheduled_at=scheduled_at, running_at=now)
    attempt._state.adding = False
    return attempt


def claim_named_step(run_id: RunId, step_name: str, rpc_name: str
                     ) -> tuple[WorkflowStep, StepAttempt] | None:
    """A step job's claim where the database allows it in one statement (PostgreSQL):
    the step named by the job, calling ``rpc_name``, of a running run, claimable now.

    Returns:
        The step (its run row carrying only ``owner_id``) and its new attempt; None when
        that did not claim it (or on other databases): ``claim_step`` after a look.
    """
    try:
        run_pk = uuid.UUID(str(run_id))
    except ValueError:
        return None
    now = clock().now()
    with changing("run", run_pk):
        claim = backend().claim_named_step(run_pk, step_name, rpc_name, now, lease_until(now))
    if claim is None:
        return None
    step = claim.step
    step.run = WorkflowRun.from_db(None, ["id", "status", "owner_id"],
                                   [step.run_id, RunStatus.RUNNING, claim.owner_id])
    attempt = StepAttempt(pk=claim.attempt_id, step=step, attempt=claim.attempt,
                          status=StepStatus.RUNNING, created_at=claim.scheduled_at or now,
                          scheduled_at=claim.scheduled_at, running_at=now)
    attempt._state.adding = False
    return step, attempt


def renew_step_lease(step_id: int) -> None:
    WorkflowStep.objects.filter(pk=step_id, status=StepStatus.RUNNING).update(
        lease_expires_at=lease_until(clock().now())
    )
