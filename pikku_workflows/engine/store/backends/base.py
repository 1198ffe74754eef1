"""The store backend interface, and its generic implementation on Django's ORM.

A backend writes the rows of the operations whose rules are worth a database's own SQL:
a step outcome written behind, a checkpoint (the next step inserted running), a run's
end, a lease taken or given back, a queued step's claim and its guarded success, and a
key merged into a run's state. ``store`` keeps everything around them (write-behind,
signals, the mirror) and picks one backend per database vendor (``backends.backend``).

Each operation has one definition per backend: a backend that overrides it does not
fall back to this one. Any database Django supports gets this class as it is.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, QuerySet

from ....models import StepAttempt, WorkflowEvent, WorkflowRun, WorkflowStep, WorkflowVersion
from ....status import RunStatus, StepStatus
from ....types import RunId, UserJSON

#: A step outcome written behind: the step row (``result`` set) and its attempt
#: (``running_at``, ``succeeded_at``, ``result`` set, not saved yet).
Outcome = tuple[WorkflowStep, StepAttempt]

#: The statuses in which a step may still report back.
IN_FLIGHT_STATUSES = (StepStatus.SCHEDULED, StepStatus.RUNNING)


def in_flight(prefix: str = "", *, children: bool = True) -> Q:
    """The definition of "in flight": a step calling a function or a workflow (queued
    step, child run) that is scheduled or running, so that it will still report back.

    ``prefix`` reaches the step through a relation (``"steps__"``). Raw SQL gets the same
    condition compiled from this one (``StoreBackend.in_flight_sql``). ``children=False``:
    queued steps only (what a finishing step waits for before it drives the pass: a child
    run wakes its parent by itself when it ends, and may be suspended for days).
    """
    q = Q(**{f"{prefix}rpc_name__isnull": False, f"{prefix}status__in": IN_FLIGHT_STATUSES})
    return q if children else q & Q(**{f"{prefix}child_run__isnull": True})


class Lease(NamedTuple):
    """A run lease to renew in the same write (the run must still be running under it)."""

    run_id: RunId
    owner: str
    until: datetime


def step_succeeded_fields(result: UserJSON, now: datetime | None) -> dict[str, Any]:
    """The one rule of a step's success: the step row's fields, by column.

    Every write of a success is built from it: the ORM's updates here and in the store,
    and the raw SQL of the backends (``sql.step_succeeded_sql``).
    """
    return {"status": StepStatus.SUCCEEDED, "result": result, "error": None,
            "updated_at": now, "lease_expires_at": None}


def attempt_succeeded_fields(result: UserJSON, now: datetime | None) -> dict[str, Any]:
    """The rule of an attempt's success: the attempt row's fields, by column."""
    return {"status": StepStatus.SUCCEEDED, "result": result, "succeeded_at": now}


class LeasedRun(NamedTuple):
    """A run leased in the same statement as the end of one of its steps."""

    run: WorkflowRun
    #: The run's steps as that statement saw them (the pass's replay snapshot, without a
    #: query of its own); None: the pass loads them.
    steps: dict[str, WorkflowStep] | None = None


class NamedClaim(NamedTuple):
    """A step claimed by name in one statement, with its new attempt's row."""

    step: WorkflowStep
    attempt_id: int
    attempt: int
    scheduled_at: datetime | None
    owner_id: Any


class SlotTake(NamedTuple):
    """A named limit's slot to take with a step's start (``checkpoint_taking``)."""

    name: str
    kind: str  # "c": concurrency, "r": rate (store.limits)
    size: int  # the limit's slots
    holder: str
    until: datetime
    #: On PostgreSQL, stamp the slot with the database's clock at the statement and hold
    #: it this many seconds (a rate's start); None: ``until`` as given.
    database_time: float | None = None
    #: A concurrency slot of the limit the pass holds already (its number and holder,
    #: the attempt before's): handed over to ``holder`` unless a step waits for it.
    passed: tuple[int, str] | None = None


class TakenCheckpoint(NamedTuple):
    """What ``checkpoint_taking`` did: the new step's id and its slot (None: the limit
    had no slot free for it, or no row yet; the step was not inserted) and whether the
    run was still running under the lease (False: nothing but the outcomes written)."""

    step_id: int | None
    slot: int | None
    live: bool


class Finished(NamedTuple):
    """What ``finish_run`` did: whether the run moved, and its state as it was then."""

    moved: bool
    state: UserJSON = None


class StoreBackend:
    """The writes with a rule of their own, on the ORM (any database)."""

    vendor = "generic"

    def __init__(self) -> None:
        self._in_flight_sql: tuple[str, list[Any]] | None = None

    # --- shared definitions -------------------------------------------------------------

    def in_flight_sql(self) -> tuple[str, list[Any]]:
        """``in_flight(children=False)`` as SQL on the step table (unaliased), with its
        parameters."""
        if self._in_flight_sql is None:
            query = WorkflowStep.objects.filter(in_flight(children=False)).query
            sql, params = query.get_compiler(connection=connection).compile(query.where)
            self._in_flight_sql = (sql, list(params))
        return self._in_flight_sql

    def estimated_count(self, queryset: QuerySet[Any]) -> int | None:
        """The database's own row estimate for ``queryset``; None where it has none."""
        return None

    # --- write-behind outcomes and the checkpoint ----------------------------------------

    def write_outcomes(self, batch: list[Outcome]) -> None:
        """Mark the steps of ``batch`` succeeded and insert their attempt rows."""
        if not batch:
            return
        with transaction.atomic(savepoint=False):
            for step, attempt in batch:
                WorkflowStep.objects.filter(pk=step.pk).update(
                    **step_succeeded_fields(step.result, attempt.succeeded_at))
            StepAttempt.objects.bulk_create([attempt for _, attempt in batch])

    def checkpoint(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                   lease: Lease | None) -> int | None:
        """Write ``batch`` and insert ``step`` (running); returns its id.

        None when ``lease`` is given and the run is no longer running under it (the
        outcomes are written all the same: those steps did run).
        """
        with transaction.atomic():
            self.write_outcomes(batch)
            if lease is not None and not self.renew_lease(lease, now):
                return None
            step.save(force_insert=True)
            return step.pk

    #: Whether ``checkpoint_taking`` exists: a step's start can take a limit's slot in
    #: its own statement (PostgreSQL). Elsewhere the slot is taken apart (its statements
    #: cost less than the transaction that would join them).
    takes_slots_in_checkpoint = False

    def checkpoint_taking(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                          lease: Lease | None, take: SlotTake) -> TakenCheckpoint:
        """``checkpoint``, inserting ``step`` only if ``take``'s slot is taken in the same
        statement (the outcomes are written either way); only where
        ``takes_slots_in_checkpoint``."""
        raise NotImplementedError(f"{self.vendor} takes a limit's slot apart")

    def renew_lease(self, lease: Lease, now: datetime) -> bool:
        """Renew a pass's lease; False if the run is no longer running under it."""
        return bool(WorkflowRun.objects.filter(
            pk=lease.run_id, status=RunStatus.RUNNING, lease_owner=lease.owner,
        ).update(lease_expires_at=lease.until, updated_at=now))

    # --- the run ------------------------------------------------------------------------

    def take_lease(self, run_id: RunId, owner: str, now: datetime, until: datetime, *,
                   unless_in_flight: bool = False) -> WorkflowRun | None:
        """Lease a running run whose lease is free, expired or ``owner``'s; its row.

        With ``unless_in_flight``, only while none of its queued steps is in flight.
        """
        if unless_in_flight and WorkflowStep.objects.filter(
                in_flight(children=False), run__pk=run_id).exists():
            return None
        if not WorkflowRun.objects.filter(
            Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now) | Q(lease_owner=owner),
            pk=run_id, status=RunStatus.RUNNING,
        ).update(lease_owner=owner, lease_expires_at=until):
            return None
        return WorkflowRun.objects.get(pk=run_id)

    def finish_run(self, batch: list[Outcome], run_id: RunId, owner: str | None,
                   changes: dict[str, Any]) -> Finished:
        """Write ``batch`` and apply ``changes`` to the run if it is running (under
        ``owner``'s lease, unless None)."""
        query = WorkflowRun.objects.filter(pk=run_id, status=RunStatus.RUNNING)
        if owner is not None:
            query = query.filter(lease_owner=owner)
        with transaction.atomic():
            self.write_outcomes(batch)
            if not query.update(**changes):
                return Finished(False)
            return Finished(True, WorkflowRun.objects.filter(pk=run_id).values_list(
                "state", flat=True).first())

    def release_lease(self, batch: list[Outcome], run_id: RunId, owner: str,
                      steps: list[WorkflowStep], now: datetime) -> None:
        """Write ``batch``, release ``owner``'s lease of the run and, only if it was
        still ``owner``'s, insert ``steps``.

        A step inserted gets its id; one that another process inserted meanwhile is
        left to it, its id None.
        """
        with transaction.atomic() if batch or steps else nullcontext():
            self.write_outcomes(batch)
            released = bool(WorkflowRun.objects.filter(pk=run_id, lease_owner=owner).update(
                lease_owner="", lease_expires_at=None))
            if released:
                self.insert_steps_unless_present(steps, now)
            else:
                for step in steps:
                    step.pk = step.id = None

    def event_watermark(self) -> int:
        """The highest event id stored now (0: none)."""
        if connection.vendor == "sqlite" and connection.in_atomic_block:
            # The write lock before the read: a transaction that reads first cannot
            # upgrade to a write once another process has committed (as lock_run).
            WorkflowEvent.objects.filter(pk=-1).update(event="")
        row = self.fetchone(
            f"SELECT COALESCE(MAX(id), 0) FROM {WorkflowEvent._meta.db_table}", [])  # noqa: S608
        return int(row[0])

    def insert_run(self, run: WorkflowRun, *, watermark: bool) -> None:
        """Insert ``run``, built by ``store.new_run``; ``watermark``: its
        ``event_watermark`` is the highest event id stored now."""
        if watermark:
            run.event_watermark = self.event_watermark()
        run.save(force_insert=True)

    def insert_steps_unless_present(self, steps: list[WorkflowStep], now: datetime) -> None:
        """Insert ``steps``, skipping (id None) those another process inserted."""
        for step in steps:
            step.created_at = step.updated_at = now
            try:
                with transaction.atomic():
                    # raw: auto_now would replace ``now``, the engine clock's time (a
                    # claim's ``scheduled_at``), with Django's.
                    step.save_base(raw=True, force_insert=True)
            except IntegrityError:
                step.pk = step.id = None

    def version_status(self, workflow: str, graph_hash: str) -> str | None:
        """The status of the version row of (``workflow``, ``graph_hash``), None if none:
        one indexed read without a model (every start asks)."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT status FROM {WorkflowVersion._meta.db_table} "  # noqa: S608
                "WHERE workflow = %s AND graph_hash = %s", [workflow, graph_hash])
            row = cursor.fetchone()
        return row[0] if row else None

    def merge_state_key(self, run_id: RunId, name: str, text: str, now: datetime) -> None:
        """Set key ``name`` of the run's state to the JSON ``text`` (other keys kept)."""
        with transaction.atomic():
            run = WorkflowRun.objects.select_for_update().get(pk=run_id)
            state = dict(run.state or {})
            state[name] = json.loads(text)
            WorkflowRun.objects.filter(pk=run_id).update(state=state, updated_at=now)

    # --- queued steps -------------------------------------------------------------------

    def fetchone(self, sql: str, params: list[Any]) -> Any:
        """The first row of ``sql``, a hot statement of a fixed shape (PostgreSQL prepares
        it on the server)."""
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()

    def fetchall(self, sql: str, params: list[Any]) -> list[Any]:
        """The rows of ``sql``, a hot statement of a fixed shape (as ``fetchone``)."""
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows: list[Any] = cursor.fetchall()
        return rows

    def runs(self, sql: str, params: list[Any]) -> list[WorkflowRun]:
        """The runs whose columns ``sql`` returns (``RETURNING *``), a hot statement of a
        fixed shape (as ``fetchone``)."""
        return list(WorkflowRun.objects.raw(sql, params))

    def claim_step(self, step_id: int, now: datetime, lease_until: datetime,
                   scheduled_at: datetime | None) -> tuple[int, int] | None:
        """Claim a pending or scheduled step that is due and insert its attempt row,
        created when it was scheduled (else now): (attempt id, attempt number); None when
        it was not claimable."""
        with transaction.atomic():
            if not WorkflowStep.objects.filter(
                Q(wake_at__isnull=True) | Q(wake_at__lte=now),
                pk=step_id, status__in=(StepStatus.PENDING, StepStatus.SCHEDULED),
            ).update(
                status=StepStatus.RUNNING, attempt_count=F("attempt_count") + 1,
                lease_expires_at=lease_until, updated_at=now,
            ):
                return None
            number = WorkflowStep.objects.filter(pk=step_id).values_list(
                "attempt_count", flat=True).get()
            attempt = StepAttempt.objects.create(
                step_id=step_id, attempt=number, status=StepStatus.RUNNING,
                created_at=scheduled_at or now, scheduled_at=scheduled_at, running_at=now)
            return attempt.pk, number

    def claim_named_step(self, run_id: RunId, step_name: str, rpc_name: str, now: datetime,
                         lease_until: datetime) -> NamedClaim | None:
        """Find a step by name and claim it in one statement, where the database can
        (see ``PostgresBackend``); None here: the caller looks, then ``claim_step``."""
        return None

    def record_success(self, step_id: int, attempt: int, result: UserJSON, now: datetime) -> bool:
        """A queued step's success and its attempt row's, only while ``attempt`` is the
        step's current (running) one; whether it was."""
        with transaction.atomic():
            if not WorkflowStep.objects.filter(
                pk=step_id, status=StepStatus.RUNNING, attempt_count=attempt,
            ).update(**step_succeeded_fields(result, now)):
                return False
            return bool(StepAttempt.objects.filter(step_id=step_id, attempt=attempt).update(
                **attempt_succeeded_fields(result, now)))

    def record_success_and_lease(self, step_id: int, attempt: int, result: UserJSON, now: datetime,
                                 run_id: RunId, owner: str, until: datetime
                                 ) -> tuple[bool, LeasedRun | None]:
        """``record_success`` and, in the same statement where the database can, the
        lease of the run as ``take_lease(unless_in_flight=True)`` would take it.

        Returns:
            Whether the success was recorded, and the leased run (None: not leased, the
            caller commits and takes the lease itself).
        """
        return self.record_success(step_id, attempt, result, now), None

