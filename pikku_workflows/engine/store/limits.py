"""Named step limits' rows: slots taken and given back, steps set waiting and woken."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, DateTimeField, F, Min, Q, Value
from django.db.models.functions import Coalesce

from ...mirror import changing
from ...models import SLOT_FREE, StepAttempt, WorkflowLimitSlot, WorkflowStep
from ...status import StepStatus
from .backends import backend

CONCURRENCY, RATE = "c", "r"


_SLOTS = WorkflowLimitSlot._meta.db_table
_STEPS = WorkflowStep._meta.db_table


def _lock() -> str:
    # Takers skip a slot another taker holds locked instead of queueing behind it.
    return " FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked \
        else ""


def _dt(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def take_slot(name: str, kind: str, size: int, holder: str, until: datetime,
              now: datetime, *, database_time: float | None = None) -> int | None:
    """Take the slot that freed first (``until`` not after ``now``) among the first ``size`` of
    the limit, for ``holder`` until ``until``: one statement. The slot's number, or None
    when none is free (or the slot rows do not exist yet: ``ensure_slots``).

    ``database_time`` (seconds): on PostgreSQL, ``now`` is the database's clock at the
    statement and ``until`` that plus ``database_time``: a rate's start is stamped when it
    is taken, however long this process took to send the statement.
    """
    if database_time is not None and connection.vendor == "postgresql":
        at, until_sql = "clock_timestamp()", "clock_timestamp() + make_interval(secs => %s)"
        until_value: Any = database_time
        params = [holder, until_value, name, kind, size]
    else:
        at, until_sql = "%s", "%s"
        params = [holder, _dt(until), name, kind, size, _dt(now)]
    row = backend().fetchone(
        f"UPDATE {_SLOTS} SET holder = %s, until = {until_sql} WHERE id = ("  # noqa: S608
        f"SELECT id FROM {_SLOTS} WHERE name = %s AND kind = %s AND slot < %s AND "
        f"until <= {at} ORDER BY until LIMIT 1{_lock()}) RETURNING slot", params)
    return None if row is None else int(row[0])


def ensure_slots(name: str, kind: str, start: int, stop: int) -> None:
    """Create the limit's slot rows ``start`` to ``stop - 1`` that do not exist yet."""
    WorkflowLimitSlot.objects.bulk_create(
        [WorkflowLimitSlot(name=name, kind=kind, slot=n) for n in range(start, stop)],
        ignore_conflicts=True)


def slot_state(name: str, kind: str, size: int, now: datetime
               ) -> tuple[int, datetime | None]:
    """How many of the limit's first ``size`` slot rows exist, and when the first taken
    one frees itself (None: none is taken)."""
    found = WorkflowLimitSlot.objects.filter(name=name, kind=kind, slot__lt=size).aggregate(
        rows=Count("id"), first=Min("until", filter=Q(until__gt=now)))
    return int(found["rows"]), found["first"]


def waiting_count(name: str) -> int:
    """How many steps wait for the limit (on its partial index)."""
    return WorkflowStep.objects.filter(waiting_for_limit=name,
                                       status=StepStatus.SCHEDULED).count()


def give_back(name: str, slot: int, holder: str) -> bool:
    """Free a concurrency slot, if ``holder`` still holds it; whether it did."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_SLOTS} SET until = %s WHERE name = %s AND kind = %s "  # noqa: S608
            "AND slot = %s AND holder = %s", [_dt(SLOT_FREE), name, CONCURRENCY, slot, holder])
        return bool(cursor.rowcount)


def renew_slots(slots: list[tuple[str, int, str]], until: datetime) -> None:
    """Extend the leases of concurrency slots still held by their holders."""
    for name, slot, holder in slots:
        WorkflowLimitSlot.objects.filter(
            name=name, kind=CONCURRENCY, slot=slot, holder=holder).update(until=until)


def wake_first_waiter(name: str, now: datetime) -> tuple[str, str, str | None] | None:
    """The step waiting longest for the limit, due from ``now`` (its ``wake_at``): its
    run id, step name and function, or None when no step waits for it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_STEPS} SET wake_at = %s WHERE id = ("  # noqa: S608
            f"SELECT id FROM {_STEPS} WHERE waiting_for_limit = %s AND status = %s AND "
            f"waiting_for_limit <> '' AND wake_at > %s ORDER BY wake_at LIMIT 1{_lock()}) "
            "RETURNING run_id, step_name, rpc_name",
            [_dt(now), name, StepStatus.SCHEDULED, _dt(now)])
        row = cursor.fetchone()
    return None if row is None else (str(row[0]), str(row[1]), row[2])


def wait_for_limit(step: WorkflowStep, limit: str, wake_at: datetime, now: datetime,
                   attempt: StepAttempt | None = None) -> bool:
    """The step waits ``scheduled`` for ``limit`` until ``wake_at``.

    ``attempt``: the attempt a step worker claimed before it found the limit full; it is
    taken back (deleted, the count lowered), guarded by still being the current one.
    Returns whether the step was changed (False: a stale claim).
    """
    rows = WorkflowStep.objects.filter(pk=step.pk)
    since = Coalesce(F("waiting_since"), Value(now, output_field=DateTimeField()))
    fields = {"status": StepStatus.SCHEDULED, "wake_at": wake_at, "updated_at": now,
              "waiting_for_limit": limit, "lease_expires_at": None, "waiting_since": since}
    with changing("run", step.run_id), transaction.atomic():
        if attempt is not None:
            rows = rows.filter(status=StepStatus.RUNNING, attempt_count=attempt.attempt)
            if not rows.update(attempt_count=attempt.attempt - 1, **fields):
                return False
            StepAttempt.objects.filter(pk=attempt.pk).delete()
            step.attempt_count = attempt.attempt - 1
        elif not rows.update(**fields):
            return False
    step.status, step.wake_at, step.waiting_for_limit = StepStatus.SCHEDULED, wake_at, limit
    step.waiting_since = step.waiting_since or now
    step.lease_expires_at = None
    return True


def give_back_and_wake(name: str, slot: int, holder: str, now: datetime
                       ) -> tuple[str, str, str | None] | None:
    """``give_back`` then, if that freed the slot, ``wake_first_waiter``: one statement
    where the database has writing CTEs (PostgreSQL).

    A slot whose lease lapsed and that another holder took is not freed, and wakes no
    one: the limit is as full as before, and a waiter woken for nothing would try, find
    it full and wait again behind the steps that began waiting after it.
    """
    if connection.vendor != "postgresql":
        if not give_back(name, slot, holder):
            return None
        return wake_first_waiter(name, now)
    # Prepared on the server (its plan costs more than its execution).
    row = backend().fetchone(
        f"WITH freed AS (UPDATE {_SLOTS} SET until = %s WHERE name = %s "  # noqa: S608
        "AND kind = %s AND slot = %s AND holder = %s RETURNING 1) "
        f"UPDATE {_STEPS} SET wake_at = %s WHERE id = ("
        f"SELECT id FROM {_STEPS} WHERE waiting_for_limit = %s AND status = 'scheduled' AND "
        "waiting_for_limit <> '' AND wake_at > %s ORDER BY wake_at LIMIT 1 "
        "FOR UPDATE SKIP LOCKED) AND EXISTS (SELECT 1 FROM freed) "
        "RETURNING run_id, step_name, rpc_name",
        [SLOT_FREE, name, CONCURRENCY, slot, holder, now, name, now])
    return None if row is None else (str(row[0]), str(row[1]), row[2])
