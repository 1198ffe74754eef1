"""The one writer of workflow rows: runs, steps, attempts, leases, status changes.

Every write of the engine and of the surfaces above it comes through here, each one
guarded so that races are decided by rowcounts. The writes whose rule a database can do
in its own SQL (a checkpoint, a run's end, a lease, a claim...) go to the backend of the
database's vendor (``backends``), chosen once; the rest are the ORM's, on every database.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet

from ...conf import pikku_settings
from ...exceptions import WorkflowRunNotFoundError, WorkflowRunStateError, WorkflowSignal
from ...mirror import changed, changing
from ...models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion
from ...signals import (
    run_started,
    send_on_commit,
    send_run_transition,
    send_step_event,
    step_failed,
    step_retried,
    step_succeeded,
)
from ...status import RunStatus, StepStatus
from ...types import RunId, UserJSON
from ..batching import Batch
from ..clock import clock
from ..serialization import encode
from .backends import Lease, backend, in_flight
from .rows import new_attempt, unsaved


class PassAborted(WorkflowSignal):
    """The run stopped being ours mid-pass (cancelled from outside, or the lease was lost)."""


class StaleAttemptError(Exception):
    """A worker's attempt is no longer the step's current one (its lease was taken over)."""


def _not_found(run_id: RunId) -> WorkflowRunNotFoundError:
    return WorkflowRunNotFoundError(f"no workflow run has the id '{run_id}'")



def run_uuid(run_id: RunId) -> uuid.UUID:
    """A run id as a UUID; a malformed one is an unknown run."""
    try:
        return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        raise _not_found(run_id) from None


def load_run(run_id: RunId) -> WorkflowRun:
    """Return the run or raise ``WorkflowRunNotFoundError`` (also for malformed ids)."""
    try:
        return WorkflowRun.objects.get(pk=run_uuid(run_id))
    except WorkflowRun.DoesNotExist:
        raise _not_found(run_id) from None


def load_steps(run_id: RunId) -> dict[str, WorkflowStep]:
    """All step rows of a run, by step name: the replay snapshot (one query)."""
    return {s.step_name: s for s in WorkflowStep.objects.filter(run__pk=run_id)}


def create_run(**fields: Any) -> WorkflowRun:
    run = WorkflowRun(status=RunStatus.RUNNING, **fields)
    with changing("run", run.pk):
        run.save(force_insert=True)
    if run_started.receivers:
        send_on_commit(run_started, run=run.pk, workflow=run.workflow)
    return run


# --- the run lease -------------------------------------------------------------------


def new_lease_owner() -> str:
    return uuid.uuid4().hex


def _lease_until(now: datetime) -> datetime:
    return now + timedelta(seconds=pikku_settings.LEASE_TIMEOUT)


def take_lease(run_id: RunId, owner: str, *, unless_in_flight: bool = False) -> WorkflowRun | None:
    """Lease a running run whose lease is free, expired or ours; its row, or None.

    With ``unless_in_flight``, only when none of its queued steps or child runs will
    still report back. One ``UPDATE ... RETURNING`` where the database has it.
    """
    now = clock().now()
    return backend().take_lease(run_uuid(run_id), owner, now, _lease_until(now),
                                unless_in_flight=unless_in_flight)


def leased_fields(owner: str) -> dict[str, Any]:
    """The lease fields of a run created already leased by ``owner``."""
    return {"lease_owner": owner, "lease_expires_at": _lease_until(clock().now())}


def _atomic_if(needed: bool) -> AbstractContextManager[object]:
    return transaction.atomic() if needed else nullcontext()


def _writing(statements: int = 1) -> AbstractContextManager[object]:
    """The transaction a write needs: none for one statement with nothing deferred to
    flush (autocommit is atomic), else one (a savepoint inside the caller's, so that a
    failed statement leaves the caller's transaction usable)."""
    if statements > 1 or _pending() or _deferred() or connection.in_atomic_block:
        return transaction.atomic()
    return nullcontext()


@contextmanager
def _run_may_be_gone(run_id: RunId, batch: list[tuple[WorkflowStep, StepAttempt]]
                     ) -> Iterator[None]:
    """Writes of step outcomes for a run that may have been deleted meanwhile (by a
    step of its own, through the ORM): its foreign keys fail, raised as not found."""
    try:
        yield
    except IntegrityError:
        if batch and not WorkflowRun.objects.filter(pk=run_id).exists():
            raise _not_found(run_id) from None
        raise


def _drop_if_gone(run_id: RunId, batch: list[tuple[WorkflowStep, StepAttempt]]) -> None:
    """After a write that matched no run: if the run is gone, drop the steps and
    attempts this pass wrote for it since (inside a caller's transaction the foreign
    keys are checked only at its commit) and raise ``WorkflowRunNotFoundError``."""
    if batch and not WorkflowRun.objects.filter(pk=run_id).exists():
        drop_orphans(run_id, [step.pk for step, _ in batch])
        raise _not_found(run_id)


def drop_orphans(run_id: RunId, step_ids: Iterable[int | None]) -> None:
    """Delete the rows a pass wrote for a run deleted under it: its steps inserted since,
    and the attempts of ``step_ids`` (the pass's steps)."""
    StepAttempt.objects.filter(step_id__in=[pk for pk in step_ids if pk is not None]).delete()
    WorkflowStep.objects.filter(run__pk=run_id).delete()


def run_exists(run_id: RunId) -> bool:
    return WorkflowRun.objects.filter(pk=run_id).exists()


def release_lease(run_id: RunId, owner: str) -> frozenset[str]:
    """Release the pass's lease, writing what it deferred first.

    Queued steps the pass dispatched with ``defer_new_step`` are inserted together with
    the release, only while the lease is still ``owner``'s, and their jobs go to Redis
    after it commits: their names are returned (nothing of theirs can have ended while
    the pass held the lease).
    """
    deferred = _take_deferred()
    batch = _take_pending()
    with _changing_runs(batch, run_id if deferred else None), _run_may_be_gone(run_id, batch):
        backend().release_lease(batch, run_id, owner, [step for step, _ in deferred],
                                clock().now())
    _succeeded(batch)
    sent = [(step, send) for step, send in deferred if step.pk is not None]
    for _, send in sent:
        transaction.on_commit(send)
    return frozenset(step.step_name for step, _ in sent)


def _renew_lease(run_id: RunId, owner: str, now: datetime) -> None:
    # One statement renews the lease and proves the run is still ours and running;
    # an external cancel_run makes it match nothing and the pass stops here.
    if not backend().renew_lease(Lease(run_id, owner, _lease_until(now)), now):
        raise PassAborted(run_id)


def finish_run(
    run_id: RunId, owner: str | None, status: str, *, output: UserJSON = None,
    error: dict[str, Any] | None = None, workflow: str | None = None,
    into: WorkflowRun | None = None,
) -> bool:
    """Move a running run to ``status``; False if it was no longer running (or not ours).

    The run's signal (``run_completed``...) goes out once the move commits. ``into``: a
    row of the run, given the moved run's fields (as ``refresh_from_db`` would).
    """
    now = clock().now()
    changes: dict[str, Any] = {
        "status": status, "error": error, "updated_at": now,
        "lease_owner": "", "lease_expires_at": None,
    }
    if status == RunStatus.COMPLETED:
        changes["output"] = output
    if status in RunStatus.terminal():
        changes["finished_at"] = now
    batch = _pending()
    with _changing_runs(batch, run_id), _run_may_be_gone(run_id, batch), \
            _atomic_if(bool(_deferred())):
        _flush_deferred()
        batch = _take_pending()
        finished = backend().finish_run(batch, run_id, owner, changes)
    if not finished.moved:
        _drop_if_gone(run_id, batch)
    if finished.moved and into is not None:
        for name, value in changes.items():
            setattr(into, name, value)
        into.state = finished.state
    _succeeded(batch)
    if finished.moved:
        send_run_transition(run_id, status, workflow=workflow, output=output, error=error)
    return finished.moved


def set_run_status(
    run_id: RunId, status: str, *, expected: tuple[str, ...], error: dict[str, Any] | None = None,
    workflow: str | None = None,
) -> bool:
    """Status-guarded transition from one of ``expected`` (used by cancel and resume)."""
    now = clock().now()
    changes: dict[str, Any] = {"status": status, "error": error, "updated_at": now}
    if status in RunStatus.terminal():
        changes.update(finished_at=now, lease_owner="", lease_expires_at=None)
    with changing("run", run_id):
        moved = bool(WorkflowRun.objects.filter(pk=run_id, status__in=expected)
                     .update(**changes))
    if moved:
        send_run_transition(run_id, status, workflow=workflow, error=error)
    return moved


# --- steps and attempts ---------------------------------------------------------------


def ensure_step(
    run_id: RunId, steps: dict[str, WorkflowStep], key: str, **fields: Any
) -> WorkflowStep:
    """Insert the step row ``key`` unless the snapshot has it; returns the row."""
    step = steps.get(key)
    if step is not None:
        return step
    step = WorkflowStep(run_id=run_id, step_name=key, **fields)
    try:
        with changing("run", run_id), _writing():
            flush_pending()
            step.save(force_insert=True)
    except IntegrityError:
        # Another process inserted it between our snapshot and now: use theirs.
        step = WorkflowStep.objects.get(run__pk=run_id, step_name=key)
    steps[key] = step
    return step


def save_new_step(step: WorkflowStep) -> None:
    """Insert a new step row (at the end of a ``batched_inserts`` block, if in one)."""
    if _inserts.add(step):
        return
    with changing("run", step.run_id), _writing():
        flush_pending()
        step.save(force_insert=True)
    if step_failed.receivers:
        _failed_at_insert([step])


def _insert_steps(steps: list[WorkflowStep]) -> None:
    with _writing(2):
        flush_pending()
        WorkflowStep.objects.bulk_create(steps)
    _changed_runs(steps)
    if step_failed.receivers:
        _failed_at_insert(steps)


def _failed_at_insert(steps: list[WorkflowStep]) -> None:
    """``step_failed`` for steps inserted already failed (data that is not JSON)."""
    for step in steps:
        if step.status == StepStatus.FAILED:
            send_step_event(step_failed, step, None, finished_at=step.updated_at,
                            error=step.error)


_inserts = Batch(_insert_steps)
# ``save_new_step`` calls in this block become one INSERT at its end (a fan-out's steps),
# before anything sent for them in the block goes out.
batched_inserts = _inserts.collecting


def new_step(run_id: RunId, key: str, **fields: Any) -> WorkflowStep:
    """An unsaved step row; ``begin_attempt`` inserts it together with its first attempt."""
    return unsaved(WorkflowStep, run_id=run_id, step_name=key, status=StepStatus.PENDING,
                   **fields)


# --- write-behind: a step's outcome commits with the next checkpoint ---------------------
#
# An inline step's result is kept in memory and written in the same transaction as the
# next step's start (or the pass's end): one commit per step. The other step and lease
# writes of a pass flush it first, so step rows reach the database in the order they
# happened.
# A crash before the flush loses only that outcome; the step then runs again, as it would
# after a crash during the step itself.

_local = threading.local()


def _pending() -> list[tuple[WorkflowStep, StepAttempt]]:
    pending = getattr(_local, "pending", None)
    if pending is None:
        pending = _local.pending = []
    return pending


def _take_pending() -> list[tuple[WorkflowStep, StepAttempt]]:
    pending = _pending()
    batch = list(pending)
    pending.clear()
    return batch


def _deferred() -> list[tuple[WorkflowStep, Callable[[], None]]]:
    deferred = getattr(_local, "deferred", None)
    if deferred is None:
        deferred = _local.deferred = []
    return deferred


def _take_deferred() -> list[tuple[WorkflowStep, Callable[[], None]]]:
    deferred = _deferred()
    taken = list(deferred)
    deferred.clear()
    return taken


def defer_new_step(step: WorkflowStep, send: Callable[[], None]) -> None:
    """A queued step the pass dispatches as it pauses: the row (``scheduled``) is
    inserted with the pass's lease release (``release_lease``), or by any earlier write
    of the pass, and ``send`` (its job) runs once that insert commits."""
    _deferred().append((step, send))


def _insert_deferred(steps: list[WorkflowStep]) -> None:
    """Insert deferred step rows, skipping any another process inserted meanwhile."""
    with transaction.atomic(savepoint=False):
        backend().insert_steps_unless_present(steps, clock().now())
        _changed_runs(steps)


def _flush_deferred() -> None:
    """Write the deferred step rows now (a write of the pass before its release)."""
    deferred = _take_deferred()
    if not deferred:
        return
    _insert_deferred([step for step, _ in deferred])
    for step, send in deferred:
        if step.pk is not None:
            transaction.on_commit(send)


def _succeeded(batch: list[tuple[WorkflowStep, StepAttempt]]) -> None:
    """``step_succeeded`` for deferred outcomes just written."""
    if step_succeeded.receivers:
        for step, attempt in batch:
            send_step_event(step_succeeded, step, attempt, finished_at=attempt.succeeded_at)


def _changed_runs(steps: Iterable[WorkflowStep]) -> None:
    """Note, once per run and in the caller's transaction, that these steps' runs changed."""
    for run_id in {step.run_id for step in steps}:
        changed("run", run_id)


def _changing_runs(batch: list[tuple[WorkflowStep, StepAttempt]], *run_ids: RunId | None
                   ) -> AbstractContextManager[object]:
    """``changing`` for the runs of these outcomes and ``run_ids`` (None left out)."""
    return changing("run", *(step.run_id for step, _ in batch),
                    *(run_id for run_id in run_ids if run_id is not None))


def flush_pending() -> None:
    """Write the deferred step outcomes and rows (inside the caller's transaction, if
    any)."""
    batch = _take_pending()
    if not batch:
        _flush_deferred()
        return
    # No savepoint: callers flush inside their own transaction, which is all or nothing.
    with transaction.atomic(savepoint=False):
        backend().write_outcomes(batch)
        _flush_deferred()
        _changed_runs(step for step, _ in batch)
    _succeeded(batch)


def _save_attempt(attempt: StepAttempt, *fields: str) -> None:
    if attempt.pk is None:
        attempt.save(force_insert=True)
    else:
        StepAttempt.objects.filter(pk=attempt.pk).update(
            **{name: getattr(attempt, name) for name in fields}
        )


def begin_attempt(run_id: RunId, owner: str, step: WorkflowStep, *, check_run: bool = True,
                  save_attempt: bool = False) -> StepAttempt:
    """Mark the step running; returns its new attempt (saved with its outcome, unless
    ``save_attempt``).

    ``check_run`` renews the lease in the same transaction, which also proves the run was
    not cancelled from outside; passes do it at most every half second.
    """
    now = clock().now()
    if step.pk is None:
        return _begin_first_attempt(run_id, owner, step, now, check_run, save_attempt)
    with transaction.atomic():
        flush_pending()
        if check_run:
            _renew_lease(run_id, owner, now)
        step.attempt_count += 1
        step.status = StepStatus.RUNNING
        step.error = None
        step.wake_at = None
        WorkflowStep.objects.filter(pk=step.pk).update(
            status=StepStatus.RUNNING, attempt_count=F("attempt_count") + 1,
            error=None, wake_at=None, updated_at=now,
        )
        attempt = new_attempt(step, step.attempt_count, now)
        if save_attempt:
            attempt.save(force_insert=True)
        changed("run", run_id)
    return attempt


def _begin_first_attempt(run_id: RunId, owner: str, step: WorkflowStep, now: datetime,
                         check_run: bool, save_attempt: bool) -> StepAttempt:
    """The checkpoint: the outcomes written behind and the new step, running (and, with
    ``check_run``, the lease renewed) in one write."""
    _flush_deferred()
    batch = _take_pending()
    step.attempt_count, step.status, step.error, step.wake_at = 1, StepStatus.RUNNING, None, None
    lease = Lease(run_id, owner, _lease_until(now)) if check_run else None
    attempt = new_attempt(step, 1, now)
    with _changing_runs(batch, run_id), _atomic_if(save_attempt):
        step_id = backend().checkpoint(batch, step, now, lease)
        if step_id is not None:
            step.pk = step.id = step_id
            step.created_at = step.updated_at = now
            step._state.adding = False
            if save_attempt:
                attempt.save(force_insert=True)
    _succeeded(batch)
    if step_id is None:
        raise PassAborted(run_id)
    return attempt


def _stale(step: WorkflowStep) -> StaleAttemptError:
    return StaleAttemptError(f"step {step.step_name!r}: attempt {step.attempt_count} was "
                             "taken over; its outcome is not recorded")


def _step_row(step: WorkflowStep, attempt: StepAttempt | None, guard: bool) -> Any:
    """The step row to update; with ``guard``, only while ``attempt`` is still current."""
    rows = WorkflowStep.objects.filter(pk=step.pk)
    if guard and attempt is not None:
        rows = rows.filter(status=StepStatus.RUNNING, attempt_count=attempt.attempt)
    return rows


def record_success(step: WorkflowStep, attempt: StepAttempt | None, result: UserJSON, *,
                   defer: bool = False, guard: bool = False,
                   lease_to: str | None = None) -> None:
    """Store a step's result; ``defer`` leaves the write to the next checkpoint.

    ``lease_to`` (a step worker about to carry the run on): where the database allows,
    the same statement also leases the run to this owner if ``take_lease(...,
    unless_in_flight=True)`` would; the leased run row is then left on
    ``attempt.leased_run`` (else None there, and the caller takes the lease itself).

    Raises:
        StaleAttemptError: With ``guard``, the attempt is no longer the current one.
    """
    now = clock().now()
    step.status, step.result, step.error = StepStatus.SUCCEEDED, result, None
    if attempt is not None:
        attempt.status, attempt.result, attempt.succeeded_at = StepStatus.SUCCEEDED, result, now
        if defer and attempt.pk is None:
            _pending().append((step, attempt))
            return
        if guard and attempt.pk is not None:
            # A queued step's success: guarded by its attempt, whose row exists. With
            # ``lease_to``, the run is leased in the same write unless a transaction of
            # the caller's is open (its commit must come before the lease is looked at).
            lease = lease_to is not None and not connection.in_atomic_block \
                and not _pending() and not _deferred()
            with changing("run", step.run_id), _writing():
                flush_pending()
                if lease:
                    recorded, leased = backend().record_success_and_lease(
                        step.pk, attempt.attempt, result, now, run_uuid(step.run_id),
                        str(lease_to), _lease_until(now))
                    attempt.leased_run = leased  # type: ignore[attr-defined]
                else:
                    recorded = backend().record_success(step.pk, attempt.attempt, result, now)
            if not recorded:
                raise _stale(step)
            if step_succeeded.receivers:
                send_step_event(step_succeeded, step, attempt, finished_at=now)
            return
    with changing("run", step.run_id), _writing(2 if attempt is not None else 1):
        flush_pending()
        if not _step_row(step, attempt, guard).update(
            status=StepStatus.SUCCEEDED, result=result, error=None, updated_at=now,
            lease_expires_at=None,
        ):
            raise _stale(step)
        if attempt is not None:
            _save_attempt(attempt, "status", "result", "succeeded_at")
    if step_succeeded.receivers:
        send_step_event(step_succeeded, step, attempt, finished_at=now)


def record_failure(
    step: WorkflowStep, attempt: StepAttempt | None, error: dict[str, Any], *, retrying: bool,
    wake_at: datetime | None = None, status: str = StepStatus.FAILED, guard: bool = False,
) -> None:
    """Store a failed attempt; ``wake_at`` is when the next attempt may start.

    ``retrying``: another attempt will follow (``step_retried``), else the step failed
    terminally (``step_failed``). ``status`` is ``scheduled`` when a step worker has
    already re-dispatched the retry.
    """
    now = clock().now()
    with changing("run", step.run_id), _writing(2 if attempt is not None else 1):
        flush_pending()
        if not _step_row(step, attempt, guard).update(
            status=status, result=None, error=error, wake_at=wake_at, updated_at=now,
            lease_expires_at=None,
        ):
            raise _stale(step)
        if attempt is not None:
            attempt.status, attempt.error, attempt.failed_at = StepStatus.FAILED, error, now
            _save_attempt(attempt, "status", "error", "failed_at")
    step.status, step.result, step.error, step.wake_at = status, None, error, wake_at
    signal = step_retried if retrying else step_failed
    if signal.receivers:
        extra = {"wake_at": wake_at} if retrying else {}
        send_step_event(signal, step, attempt, finished_at=now, error=error, **extra)


def mark_dispatched(step: WorkflowStep) -> None:
    """A queued step's job reached Redis: ``pending`` becomes ``scheduled``."""
    if not _marks.add(step):
        _mark_scheduled([step])


def _mark_scheduled(steps: list[WorkflowStep]) -> None:
    with changing("run", *(step.run_id for step in steps)):
        WorkflowStep.objects.filter(
            pk__in=[step.pk for step in steps], status=StepStatus.PENDING
        ).update(status=StepStatus.SCHEDULED, updated_at=clock().now())


_marks = Batch(_mark_scheduled)
# ``mark_dispatched`` calls in this block become one UPDATE at its end.
batched_marks = _marks.collecting


def requeue_failed(step: WorkflowStep) -> None:
    """A failed (not exhausted) queued step goes back to ``pending`` for its next attempt."""
    flush_pending()
    WorkflowStep.objects.filter(pk=step.pk, status=StepStatus.FAILED).update(
        status=StepStatus.PENDING, updated_at=clock().now()
    )
    step.status = StepStatus.PENDING


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
        step = backend().claim_named_step(run_pk, step_name, rpc_name, now, _lease_until(now))
    if step is None:
        return None
    row: Any = step
    step.run = WorkflowRun.from_db(None, ["id", "status", "owner_id"],
                                   [step.run_id, RunStatus.RUNNING, row.pikku_owner_id])
    attempt = StepAttempt(pk=row.pikku_attempt_id, step=step, attempt=row.pikku_attempt,
                          status=StepStatus.RUNNING, created_at=row.pikku_scheduled_at or now,
                          scheduled_at=row.pikku_scheduled_at, running_at=now)
    attempt._state.adding = False
    return step, attempt


def claim_step(step: WorkflowStep) -> StepAttempt | None:
    """Take a queued step for this worker: one status-guarded UPDATE decides the winner.

    Returns:
        The new attempt, or None if the step was not claimable (a duplicate or late job).
    """
    now = clock().now()
    scheduled_at = step.updated_at if step.status == StepStatus.SCHEDULED else None
    with changing("run", step.run_id):
        claimed = backend().claim_step(step.pk, now, _lease_until(now), scheduled_at)
    if claimed is None:
        return None
    step.attempt_count, step.status = claimed[1], StepStatus.RUNNING
    attempt = StepAttempt(pk=claimed[0], step=step, attempt=claimed[1],
                          status=StepStatus.RUNNING, created_at=scheduled_at or now,
                          scheduled_at=scheduled_at, running_at=now)
    attempt._state.adding = False
    return attempt


def renew_step_lease(step_id: int) -> None:
    WorkflowStep.objects.filter(pk=step_id, status=StepStatus.RUNNING).update(
        lease_expires_at=_lease_until(clock().now())
    )


def renew_run_lease(run_id: RunId, owner: str) -> None:
    WorkflowRun.objects.filter(pk=run_id, lease_owner=owner).update(
        lease_expires_at=_lease_until(clock().now())
    )


def set_branch(run_id: RunId, step_name: str, key: str) -> None:
    flush_pending()
    with changing("run", run_id):
        WorkflowStep.objects.filter(run__pk=run_id, step_name=step_name).update(
            branch_taken=key)


def _in_flight(run_id: RunId | OuterRef) -> QuerySet[WorkflowStep]:
    # Queued steps only: a child run wakes its parent by itself when it ends.
    return WorkflowStep.objects.filter(in_flight(children=False), run__pk=run_id)


def awaited_steps(run_ref: RunId | OuterRef) -> QuerySet[WorkflowStep]:
    """Steps of the run that will still move it on by themselves, as the recovery sweep
    counts them: the steps ``in_flight`` but those that cannot report any more (one whose
    child run ended: its parent must be woken; one running under no lease of its own and
    no child run: begun by a pass that died), and sleeps (scheduled, calling nothing:
    their wake-up drives the run)."""
    return WorkflowStep.objects.filter(
        in_flight() | Q(status=StepStatus.SCHEDULED, rpc_name__isnull=True),
        Q(child_run__isnull=True) | Q(child_run__status__in=(
            RunStatus.RUNNING, RunStatus.SUSPENDED)),
        run__pk=run_ref,
    ).exclude(status=StepStatus.RUNNING, child_run__isnull=True, lease_expires_at__isnull=True)


def steps_in_flight(run_id: RunId) -> bool:
    """Whether some queued step of the run will still report back."""
    return _in_flight(run_id).exists()


def status_and_flight(run_id: RunId) -> tuple[str, bool]:
    """The run's status, and whether ``steps_in_flight`` (one query).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
    """
    row = WorkflowRun.objects.filter(pk=run_uuid(run_id)).annotate(
        flying=Exists(_in_flight(OuterRef("pk")))).values_list("status", "flying").first()
    if row is None:
        raise _not_found(run_id)
    return row


def left_to_this_pass(run_id: RunId, step_names: set[str]) -> bool:
    """Whether work these waited-on steps did while the pass unwound is now the pass's to
    carry on: a child run of one ended, or one ended and no queued step is in flight.

    (While queued steps are in flight, the last of them to finish carries the run on.)
    """
    waited = WorkflowStep.objects.filter(run__pk=run_id, step_name__in=step_names)
    if waited.filter(child_run__status__in=RunStatus.terminal()).exists():
        return True
    return not steps_in_flight(run_id) and waited.filter(
        status__in=(StepStatus.SUCCEEDED, StepStatus.FAILED)).exists()


def due_runs(workflows: list[str], *, limit: int) -> list[uuid.UUID]:
    """Running, unleased runs of these workflows on workers whose sleep or retry delay is
    over (an inline run's own process wakes it)."""
    now = clock().now()
    return list(
        WorkflowStep.objects.filter(
            Q(status=StepStatus.SCHEDULED, rpc_name__isnull=True) | Q(status=StepStatus.FAILED),
            Q(run__lease_expires_at__isnull=True) | Q(run__lease_expires_at__lt=now),
            wake_at__lte=now, run__status=RunStatus.RUNNING, run__workflow__in=workflows,
            run__inline=False,
        ).order_by("wake_at").values_list("run_id", flat=True).distinct()[:limit]
    )


def fail_lost_attempt(step: WorkflowStep, *, retrying: bool) -> None:
    """A step left ``running`` by a pass that died: its last attempt counts as failed."""
    error = {"message": "the process running this attempt was lost", "type": "WorkerLost"}
    attempt = last_attempt(step) or StepAttempt(
        step=step, attempt=step.attempt_count, created_at=step.updated_at,
        running_at=step.updated_at,
    )
    record_failure(step, attempt, error, retrying=retrying)


# --- run state --------------------------------------------------------------------------


def merge_state_key(run_id: RunId, name: str, value: UserJSON) -> None:
    """Set one key of the run's state with a single UPDATE that merges it in the database.

    Concurrent writers of different keys therefore never clobber each other.
    """
    text = encode(value, what=f"state value '{name}'")
    flush_pending()
    with changing("run", run_id):
        backend().merge_state_key(run_id, name, text, clock().now())


def read_state_key(run_id: RunId, name: str) -> UserJSON:
    """One key of the run's state, read fresh."""
    state = WorkflowRun.objects.filter(pk=run_id).values_list("state", flat=True).first()
    return (state or {}).get(name)


def replace_state_key_if(run_id: RunId, name: str, expected: UserJSON, value: UserJSON
                         ) -> bool:
    """Compare-and-set one state key under the run row's lock; False if it changed."""
    with transaction.atomic():
        state = (
            WorkflowRun.objects.select_for_update().filter(pk=run_id)
            .values_list("state", flat=True).first()
        )
        if (state or {}).get(name) != expected:
            return False
        merge_state_key(run_id, name, value)
        return True


def lock_run(run_id: RunId) -> WorkflowRun:
    """The run row under ``SELECT ... FOR UPDATE`` (call first in a transaction)."""
    if connection.vendor == "sqlite":
        # SQLite has no row locks: a write first takes the database's write lock (waiting
        # out another writer), where a read first would fail to upgrade to a write once
        # another connection (another process, the mirror's forwarder) had committed.
        WorkflowRun.objects.filter(pk=run_id).update(lease_owner=F("lease_owner"))
    return WorkflowRun.objects.select_for_update().get(pk=run_id)


def close_waiting_steps(run_id: RunId, error: dict[str, Any], *,
                        children_only: bool = False) -> int:
    """End the steps of a cancelled run that only wait (pending, scheduled, suspended, or
    running under no live lease: gates, sleeps, child-run steps) as failed, with their
    open attempts. A step a worker runs under a live lease is left to its worker.
    ``children_only``: only the steps that wait for a child run (a run that ended).

    Returns:
        How many steps were closed.
    """
    now = clock().now()
    waiting = WorkflowStep.objects.filter(run__pk=run_id).filter(
        Q(status__in=(StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.SUSPENDED))
        | Q(status=StepStatus.RUNNING)
        & (Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
    )
    if children_only:
        waiting = waiting.filter(child_run__isnull=False)
    with transaction.atomic():
        ids = list(waiting.values_list("pk", flat=True))
        if not ids:
            return 0
        StepAttempt.objects.filter(
            step_id__in=ids, succeeded_at__isnull=True, failed_at__isnull=True,
        ).update(status=StepStatus.FAILED, error=error, failed_at=now)
        WorkflowStep.objects.filter(pk__in=ids).update(
            status=StepStatus.FAILED, error={**error, "fatal": True}, wake_at=None,
            lease_expires_at=None, updated_at=now)
        changed("run", run_id)
    return len(ids)


def live_child_ids(run_id: RunId) -> list[uuid.UUID]:
    return list(
        WorkflowRun.objects.filter(
            parent_run__pk=run_id, status__in=(RunStatus.RUNNING, RunStatus.SUSPENDED)
        ).values_list("pk", flat=True)
    )


def child_run_statuses(run_id: RunId) -> list[tuple[uuid.UUID, str]]:
    """The run's child runs, each as (id, status)."""
    return list(WorkflowRun.objects.filter(parent_run__pk=run_id).values_list("pk", "status"))


def parent_run_id(run_id: RunId) -> uuid.UUID | None:
    """The id of the run's parent run (None for a run started by code, or no such run)."""
    return WorkflowRun.objects.filter(pk=run_id).values_list("parent_run_id", flat=True).first()


def with_live_descendants(run_ids: Sequence[RunId]) -> dict[uuid.UUID, uuid.UUID]:
    """Which of these runs have a running or suspended descendant (child, grandchild...).

    One query per level of nesting below them.

    Returns:
        For each such run, one of its live descendants.
    """
    live = (RunStatus.RUNNING, RunStatus.SUSPENDED)
    root_of = {run_uuid(run_id): run_uuid(run_id) for run_id in run_ids}
    found: dict[uuid.UUID, uuid.UUID] = {}
    frontier = list(root_of)
    while frontier:
        rows = WorkflowRun.objects.filter(parent_run__pk__in=frontier).values_list(
            "pk", "parent_run_id", "status")
        frontier = []
        for pk, parent, status in rows:
            root = root_of[parent]
            if pk in root_of:  # a cycle written by hand: walk it once
                continue
            root_of[pk] = root
            frontier.append(pk)
            if status in live:
                found.setdefault(root, pk)
    return found


def last_attempt(step: WorkflowStep) -> StepAttempt | None:
    return StepAttempt.objects.filter(step=step, attempt=step.attempt_count).first()


# --- writes of the lifecycle, recovery and the surfaces -----------------------------------


def attach_child_run(step: WorkflowStep, child: WorkflowRun) -> None:
    """Record ``child`` as the run that ``step`` waits for."""
    WorkflowStep.objects.filter(pk=step.pk).update(child_run=child)
    step.child_run = child


def touch_run(run_id: RunId) -> None:
    """Stamp the run as just re-driven (recovery: not re-driven again while it waits)."""
    WorkflowRun.objects.filter(pk=run_id).update(updated_at=clock().now())


def touch_step(step_id: int) -> None:
    """Stamp the step as just re-dispatched (recovery)."""
    WorkflowStep.objects.filter(pk=step_id).update(updated_at=clock().now())


def leave_pending(step: WorkflowStep) -> bool:
    """A claimable (pending or scheduled) step goes back to ``pending``; False if it was
    not claimable (a stale job)."""
    return bool(WorkflowStep.objects.filter(
        pk=step.pk, status__in=(StepStatus.PENDING, StepStatus.SCHEDULED)
    ).update(status=StepStatus.PENDING))


def open_suspend_gate(run_id: RunId, step_name: str, data: UserJSON) -> WorkflowStep | None:
    """The suspended step ``step_name`` succeeds with ``data``; the step, or None if it
    was not suspended."""
    now = clock().now()
    with changing("run", run_id):
        opened = WorkflowStep.objects.filter(
            run__pk=run_id, step_name=step_name, status=StepStatus.SUSPENDED
        ).update(status=StepStatus.SUCCEEDED, result=data, updated_at=now)
    if not opened:
        return None
    return WorkflowStep.objects.get(run__pk=run_id, step_name=step_name)


def reopen_failed_steps(run_id: RunId) -> list[uuid.UUID]:
    """A retried run: no longer finished, and its failed steps ``pending`` again with a
    fresh budget (``retries + 1`` more attempts). Call inside a transaction.

    Returns:
        The ids of the failed child runs of those steps (to retry as well).
    """
    WorkflowRun.objects.filter(pk=run_id).update(finished_at=None)
    failed = WorkflowStep.objects.filter(run__pk=run_id, status=StepStatus.FAILED)
    children = list(failed.filter(
        child_run__status=RunStatus.FAILED).values_list("child_run_id", flat=True))
    failed.update(status=StepStatus.PENDING, error=None, wake_at=None,
                  attempt_base=F("attempt_count"))
    changed("run", run_id)
    return children


def delete_runs(run_ids: Sequence[RunId]) -> None:
    """Delete these runs with their steps, attempts and child runs (one transaction).

    Raises:
        WorkflowRunStateError: One of them has a live descendant (it would be deleted
            with it while it runs); nothing is deleted.
    """
    with transaction.atomic():
        live = with_live_descendants(run_ids)
        if live:
            run_id, child_id = next(iter(live.items()))
            raise WorkflowRunStateError(
                f"run {run_id} has a live descendant run {child_id}: deleting it would "
                f"delete that run too; cancel it (or wait for it to finish) first")
        WorkflowRun.objects.filter(pk__in=run_ids).delete()


def version_status(workflow: str, graph_hash: str) -> str | None:
    """The status of the version row of (``workflow``, ``graph_hash``); None if there is
    none. One indexed read without a model: every start asks."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT status FROM {WorkflowVersion._meta.db_table} "  # noqa: S608
            "WHERE workflow = %s AND graph_hash = %s", [workflow, graph_hash])
        row = cursor.fetchone()
    return row[0] if row else None


def ensure_version(workflow: str, graph_hash: str, graph: dict[str, Any], source: str
                   ) -> tuple[WorkflowVersion, bool]:
    """The version row of (``workflow``, ``graph_hash``), created if missing (the first
    write wins); whether it was created."""
    found = WorkflowVersion.objects.filter(workflow=workflow, graph_hash=graph_hash).first()
    if found is not None:
        return found, False
    try:
        # The mirror's entry commits with the row (its pk is not known before). The
        # transaction starts with its write: on SQLite a read first could not upgrade.
        with transaction.atomic():
            version = WorkflowVersion.objects.create(
                workflow=workflow, graph_hash=graph_hash, graph=graph, source=source)
            changed("version", version.pk)
    except IntegrityError:  # another process created it first
        return WorkflowVersion.objects.get(workflow=workflow, graph_hash=graph_hash), False
    return version, True


def set_version_status(version_id: int, status: str) -> None:
    """Accept or decline a workflow version."""
    with changing("version", version_id):
        WorkflowVersion.objects.filter(pk=version_id).update(status=status)
