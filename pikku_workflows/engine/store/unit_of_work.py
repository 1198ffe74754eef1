"""A pass's unit of work: the writes it holds back, and the one protocol that commits them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F

from ...exceptions import WorkflowDeadlineExceeded
from ...mirror import changed, changing
from ...models import StepAttempt, WorkflowRun, WorkflowStep
from ...signals import send_run_transition, send_step_event, step_failed, step_succeeded
from ...status import RunStatus, StepStatus
from ...types import RunId, UserJSON
from ..clock import clock
from .backends import Lease, Outcome, SlotTake, backend
from .errors import PassAborted, not_found
from .rows import new_attempt
from .runs import drop_orphans, lease_until


class UnitOfWork:
    """The writes of one orchestrator pass over a run, made under the pass's lease.

    The pass creates it with its lease (``run_id``, ``owner``) and hands it to its
    ``WorkflowContext``, which hands it to every store write of the pass. The commit
    protocol, all of it in this class:

    - **Write-behind.** An in-pass step's success is held here (``defer_outcome``) and
      written by the pass's next write, in its transaction: the next step's start
      (``begin_attempt``: one statement with it, the checkpoint), the pass's end
      (``finish_run``, ``release_lease``), or any other write given this unit (each
      calls ``flush`` first). One commit per step. A crash before that write loses only
      that outcome: the step runs again, as after a crash during it.
    - **Order.** Every write flushes what is held first, so step rows reach the database
      in the order the steps happened.
    - **Queued steps dispatched as the pass pauses** (``defer_new_step``) are inserted,
      ``scheduled``, with the lease's release and only while the lease is still the
      pass's; their jobs go to the transport once that commits.
    - **Fan-outs.** Steps reached inside ``collecting_inserts`` are inserted in one
      statement at its end, before any job sent for them.
    - **Lease checks.** ``begin_attempt(check_run=True)`` renews the lease in the same
      write, which proves the run is still running and still the pass's (a cancel from
      outside makes it fail: ``PassAborted``).
    - **Signals** for written outcomes (``step_succeeded``) go out after their write.
    - **Step limits' slots.** A limited step's slot is taken by its start's write where
      the backend can (``begin_attempt_taking``: one statement on PostgreSQL) and, when
      its attempt ends, held here (``defer_give_back``) until the pass's next write: the
      next step's start hands it over to that step if it needs the same limit and no
      step waits for it,
      else it is given back (waking the step that waited longest) once that write
      commits; a write that rolls back leaves it held, for the next one or the pass's end.
    """

    def __init__(self, run_id: RunId, owner: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self._outcomes: list[Outcome] = []
        self._new_steps: list[tuple[WorkflowStep, Callable[[], None]]] = []
        self._inserts: list[WorkflowStep] | None = None
        #: The run's deadline (``WorkflowRun.deadline_at``): no step starts past it.
        self.deadline_at: datetime | None = None
        #: Concurrency slots of ended attempts not given back yet (name, slot, holder).
        self._slots: list[tuple[str, int, str]] = []
        self._give_back: Callable[[list[tuple[str, int, str]]], None] | None = None
        #: Give-backs waiting for the commit of the transaction they were made in.
        self._giving: list[_GiveBackOnCommit] = []

    def check_deadline(self, now: datetime | None = None) -> None:
        """Refuse to start a step past the run's deadline.

        Raises:
            WorkflowDeadlineExceeded: The deadline has passed.
        """
        if self.deadline_at is not None and (now or clock().now()) >= self.deadline_at:
            raise WorkflowDeadlineExceeded(self.run_id, self.deadline_at)

    @property
    def pending(self) -> bool:
        """Whether the pass holds writes back."""
        return bool(self._outcomes or self._new_steps)

    # --- what the pass holds back -------------------------------------------------------

    def defer_outcome(self, step: WorkflowStep, attempt: StepAttempt) -> None:
        """Hold an in-pass step's success (step and attempt fields set) for the next write."""
        self._outcomes.append((step, attempt))

    def defer_new_step(self, step: WorkflowStep, send: Callable[[], None]) -> None:
        """A queued step the pass dispatches as it pauses: the row (``scheduled``) is
        inserted with the pass's lease release (``release_lease``), or by any earlier
        write of the pass, and ``send`` (its job) runs once that insert commits."""
        self.check_deadline()
        self._new_steps.append((step, send))

    def defer_give_back(self, slots: list[tuple[str, int, str]],
                        give_back: Callable[[list[tuple[str, int, str]]], None]) -> None:
        """Hold an ended attempt's concurrency slots (name, slot, holder) until the pass's
        next write; ``give_back`` gives slots back (and wakes their waiters).

        Their leases are not renewed meanwhile: no attempt uses them, and a slot the
        workflow's own code kept idle past ``LEASE_TIMEOUT`` should go to a waiting
        step. A lapsed slot another holder took is neither handed over nor freed by
        the give-back (both match the holder).
        """
        self._slots.extend(slots)
        self._give_back = give_back

    def passed_slot(self, name: str) -> tuple[int, str] | None:
        """A held slot of the limit ``name`` (its number and holder), to hand over."""
        self._reclaim_rolled_back()
        for held, slot, holder in self._slots:
            if held == name:
                return slot, holder
        return None

    def give_back_slots(self) -> None:
        """Give back the held slots now; after the caller's transaction commits, if in one
        (waiters are woken by jobs, which must find the slots freed). If it rolls back,
        the unit holds them again: its next write, or the pass's end, gives them back."""
        self._reclaim_rolled_back()
        slots, self._slots = self._slots, []
        if not slots or self._give_back is None:
            return
        if connection.in_atomic_block:
            giving = _GiveBackOnCommit(self, slots, self._give_back)
            self._giving.append(giving)
            transaction.on_commit(giving)
        else:
            self._give_back(slots)

    def _reclaim_rolled_back(self) -> None:
        """Hold again the slots of give-backs whose transaction rolled back (Django has
        no rollback hook: a rollback drops its on-commit callbacks, which is what this
        looks for)."""
        if not self._giving:
            return
        queued = {id(func) for _, func, _ in transaction.get_connection().run_on_commit}
        for giving in list(self._giving):
            if id(giving) not in queued:
                self._giving.remove(giving)
                giving.reclaimed = True
                self._slots.extend(giving.slots)

    def _take_outcomes(self) -> list[Outcome]:
        batch, self._outcomes = self._outcomes, []
        return batch

    def _take_new_steps(self) -> list[tuple[WorkflowStep, Callable[[], None]]]:
        taken, self._new_steps = self._new_steps, []
        return taken

    # --- writing what is held -----------------------------------------------------------

    def writing(self, statements: int = 1) -> AbstractContextManager[object]:
        """The transaction a write of the pass needs: see ``writing``."""
        return writing(self, statements)

    def flush(self) -> None:
        """Write the held outcomes and new steps (inside the caller's transaction, if any),
        and give back the held slots."""
        self.give_back_slots()
        batch = self._take_outcomes()
        if not batch:
            self._flush_new_steps()
            return
        # No savepoint: callers flush inside their own transaction, which is all or nothing.
        with transaction.atomic(savepoint=False):
            backend().write_outcomes(batch)
            self._flush_new_steps()
            _changed_runs(step for step, _ in batch)
        _succeeded(batch)

    def _flush_new_steps(self) -> None:
        new_steps = self._take_new_steps()
        if not new_steps:
            return
        steps = [step for step, _ in new_steps]
        with transaction.atomic(savepoint=False):
            backend().insert_steps_unless_present(steps, clock().now())
            _changed_runs(steps)
        for step, send in new_steps:
            if step.pk is not None:
                transaction.on_commit(send)

    # --- the checkpoint -------------------------------------------------------------------

    def begin_attempt(self, step: WorkflowStep, *, check_run: bool = True,
                      save_attempt: bool = False) -> StepAttempt:
        """Mark the step running; returns its new attempt (saved with its outcome, unless
        ``save_attempt``).

        ``check_run`` renews the lease in the same transaction, which also proves the run
        was not cancelled from outside; passes do it at most every half second.

        Raises:
            PassAborted: With ``check_run``, the run is no longer running under the lease.
        """
        now = clock().now()
        self.check_deadline(now)
        if step.pk is None:
            return self._checkpoint(step, now, check_run, save_attempt)
        with transaction.atomic():
            self.flush()
            if check_run:
                self._renew_lease(now)
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
            changed("run", self.run_id)
        return attempt

    def begin_attempt_taking(self, step: WorkflowStep, take: SlotTake, *, check_run: bool
                             ) -> tuple[StepAttempt, int] | None:
        """A new step's first attempt with a named limit's slot, in one write: the
        outcomes held, the lease renewed (``check_run``), the slot taken (or handed over:
        ``take.passed``) and the step inserted running. Returns the attempt and the slot;
        None when the slot was not taken (the limit is full, or its rows are not made
        yet): the outcomes are written, the step is not, the held slots are given back.

        Raises:
            PassAborted: With ``check_run``, the run is no longer running under the lease.
        """
        now = clock().now()
        self.check_deadline(now)
        passed = take.passed
        if passed is not None:
            self._slots.remove((take.name, *passed))
        self.give_back_slots()  # the others (a step of another limit ended)
        self._flush_new_steps()
        batch = self._take_outcomes()
        lease = Lease(self.run_id, self.owner, lease_until(now)) if check_run else None
        before = (step.attempt_count, step.status, step.error, step.wake_at)
        step.attempt_count, step.status = 1, StepStatus.RUNNING
        step.error = step.wake_at = None
        with _changing_runs(batch, self.run_id):
            taken = backend().checkpoint_taking(batch, step, now, lease, take)
        _succeeded(batch)
        if taken.step_id is None or taken.slot is None:
            step.attempt_count, step.status, step.error, step.wake_at = before
            if passed is not None:
                self._slots.append((take.name, *passed))
            self.give_back_slots()
            if not taken.live:
                raise PassAborted(self.run_id)
            return None
        step.pk = step.id = taken.step_id
        step.created_at = step.updated_at = now
        step._state.adding = False
        return new_attempt(step, 1, now), taken.slot

    def _checkpoint(self, step: WorkflowStep, now: datetime, check_run: bool,
                    save_attempt: bool) -> StepAttempt:
        """The outcomes held, and the new step running (with ``check_run``, the lease
        renewed), in one write."""
        self.give_back_slots()
        self._flush_new_steps()
        batch = self._take_outcomes()
        step.attempt_count, step.status = 1, StepStatus.RUNNING
        step.error = step.wake_at = None
        lease = Lease(self.run_id, self.owner, lease_until(now)) if check_run else None
        attempt = new_attempt(step, 1, now)
        with _changing_runs(batch, self.run_id), _atomic_if(save_attempt):
            step_id = backend().checkpoint(batch, step, now, lease)
            if step_id is not None:
                step.pk = step.id = step_id
                step.created_at = step.updated_at = now
                step._state.adding = False
                if save_attempt:
                    attempt.save(force_insert=True)
        _succeeded(batch)
        if step_id is None:
            raise PassAborted(self.run_id)
        return attempt

    def _renew_lease(self, now: datetime) -> None:
        # One statement renews the lease and proves the run is still ours and running;
        # an external cancel_run makes it match nothing and the pass stops here.
        if not backend().renew_lease(Lease(self.run_id, self.owner, lease_until(now)), now):
            raise PassAborted(self.run_id)

    # --- new step rows --------------------------------------------------------------------

    def ensure_step(self, steps: dict[str, WorkflowStep], key: str, **fields: Any
                    ) -> WorkflowStep:
        """Insert the step row ``key`` unless the snapshot ``steps`` has it; returns the row."""
        step = steps.get(key)
        if step is not None:
            return step
        step = WorkflowStep(run_id=self.run_id, step_name=key, **fields)
        with changing("run", self.run_id), self.writing():
            self.flush()
            try:
                # A savepoint in a transaction: a duplicate undoes the insert only, not
                # the outcomes just flushed.
                with _atomic_if(connection.in_atomic_block):
                    step.save(force_insert=True)
            except IntegrityError:
                # Another process inserted it between our snapshot and now: use theirs.
                step = WorkflowStep.objects.get(run__pk=self.run_id, step_name=key)
        steps[key] = step
        return step

    def save_new_step(self, step: WorkflowStep) -> None:
        """Insert a new step row (at the end of a ``collecting_inserts`` block, if in one)."""
        if self._inserts is not None:
            self._inserts.append(step)
            return
        with changing("run", step.run_id), self.writing():
            self.flush()
            step.save(force_insert=True)
        if step_failed.receivers:
            _failed_at_insert([step])

    @contextmanager
    def collecting_inserts(self) -> Iterator[None]:
        """``save_new_step`` calls in this block become one INSERT at its end (a fan-out's
        steps), before anything sent for them in the block goes out; at the end of the
        outermost block, even when it raises (those steps were reached)."""
        if self._inserts is not None:
            yield
            return
        self._inserts = []
        try:
            yield
        finally:
            steps, self._inserts = self._inserts, None
            if steps:
                self._insert_steps(steps)

    def _insert_steps(self, steps: list[WorkflowStep]) -> None:
        with self.writing(2):
            self.flush()
            WorkflowStep.objects.bulk_create(steps)
        _changed_runs(steps)
        if step_failed.receivers:
            _failed_at_insert(steps)

    # --- the pass's end -------------------------------------------------------------------

    def release_lease(self) -> frozenset[str]:
        """Release the pass's lease, writing what it held first.

        The new queued steps (``defer_new_step``) are inserted together with the release,
        only while the lease is still the pass's, and their jobs go to the transport after
        it commits: their names are returned (nothing of theirs can have ended while the
        pass held the lease).
        """
        new_steps = self._take_new_steps()
        batch = self._take_outcomes()
        with _changing_runs(batch, self.run_id if new_steps else None), \
                _run_may_be_gone(self.run_id, batch):
            backend().release_lease(batch, self.run_id, self.owner,
                                    [step for step, _ in new_steps], clock().now())
        _succeeded(batch)
        sent = [(step, send) for step, send in new_steps if step.pk is not None]
        for _, send in sent:
            transaction.on_commit(send)
        self.give_back_slots()
        return frozenset(step.step_name for step, _ in sent)

    def finish_run(self, status: str, *, output: UserJSON = None,
                   error: dict[str, Any] | None = None, workflow: str | None = None,
                   into: WorkflowRun | None = None) -> bool:
        """Move the running run to ``status``, writing what the pass held in the same
        statement; False if it was no longer running under the pass's lease.

        The run's signal (``run_completed``...) goes out once the move commits. ``into``:
        a row of the run, given the moved run's fields (as ``refresh_from_db`` would).

        Raises:
            WorkflowRunNotFoundError: The run was deleted under the pass (the rows the
                pass wrote for it are deleted too).
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
        with _changing_runs(self._outcomes, self.run_id), \
                _run_may_be_gone(self.run_id, self._outcomes), _atomic_if(bool(self._new_steps)):
            self._flush_new_steps()
            batch = self._take_outcomes()
            finished = backend().finish_run(batch, self.run_id, self.owner, changes)
        if not finished.moved:
            _drop_if_gone(self.run_id, batch)
        if finished.moved and into is not None:
            for name, value in changes.items():
                setattr(into, name, value)
            into.state = finished.state
        _succeeded(batch)
        self.give_back_slots()
        if finished.moved:
            send_run_transition(self.run_id, status, workflow=workflow, output=output,
                                error=error)
        return finished.moved


class _GiveBackOnCommit:
    """A unit's give-back of ``slots``, run once its transaction commits, unless the
    unit took the slots back meanwhile (it saw the transaction roll back)."""

    def __init__(self, work: UnitOfWork, slots: list[tuple[str, int, str]],
                 give_back: Callable[[list[tuple[str, int, str]]], None]) -> None:
        self.work = work
        self.slots = slots
        self.give_back = give_back
        self.reclaimed = False

    def __call__(self) -> None:
        if self.reclaimed:
            return
        # Off the unit's list first: from here the slots are given back, never reclaimed.
        if self in self.work._giving:
            self.work._giving.remove(self)
        self.give_back(self.slots)


def writing(work: UnitOfWork | None, statements: int = 1) -> AbstractContextManager[object]:
    """The transaction a write needs: none for one statement with nothing held to flush
    (autocommit is atomic), else one (a savepoint inside the caller's, so that a failed
    statement leaves the caller's transaction usable)."""
    if statements > 1 or (work is not None and work.pending) or connection.in_atomic_block:
        return transaction.atomic()
    return nullcontext()


def flush(work: UnitOfWork | None) -> None:
    """``work.flush()``, for a write made inside a pass or outside one (None)."""
    if work is not None:
        work.flush()


def _atomic_if(needed: bool) -> AbstractContextManager[object]:
    return transaction.atomic() if needed else nullcontext()


@contextmanager
def _run_may_be_gone(run_id: RunId, batch: list[Outcome]) -> Iterator[None]:
    """Writes of step outcomes for a run that may have been deleted meanwhile (by a
    step of its own, through the ORM): its foreign keys fail, raised as not found."""
    try:
        yield
    except IntegrityError:
        if batch and not WorkflowRun.objects.filter(pk=run_id).exists():
            raise not_found(run_id) from None
        raise


def _drop_if_gone(run_id: RunId, batch: list[Outcome]) -> None:
    """After a write that matched no run: if the run is gone, drop the steps and
    attempts this pass wrote for it since (inside a caller's transaction the foreign
    keys are checked only at its commit) and raise ``WorkflowRunNotFoundError``."""
    if batch and not WorkflowRun.objects.filter(pk=run_id).exists():
        drop_orphans(run_id, [step.pk for step, _ in batch])
        raise not_found(run_id)


def _succeeded(batch: list[Outcome]) -> None:
    """``step_succeeded`` for held outcomes just written."""
    if step_succeeded.receivers:
        for step, attempt in batch:
            send_step_event(step_succeeded, step, attempt, finished_at=attempt.succeeded_at)


def _failed_at_insert(steps: list[WorkflowStep]) -> None:
    """``step_failed`` for steps inserted already failed (data that is not JSON)."""
    for step in steps:
        if step.status == StepStatus.FAILED:
            send_step_event(step_failed, step, None, finished_at=step.updated_at,
                            error=step.error)


def _changed_runs(steps: Iterable[WorkflowStep]) -> None:
    """Note, once per run and in the caller's transaction, that these steps' runs changed."""
    for run_id in {step.run_id for step in steps}:
        changed("run", run_id)


def _changing_runs(batch: list[Outcome], *run_ids: RunId | None
                   ) -> AbstractContextManager[object]:
    """``changing`` for the runs of these outcomes and ``run_ids`` (None left out)."""
    return changing("run", *(step.run_id for step, _ in batch),
                    *(run_id for run_id in run_ids if run_id is not None))
