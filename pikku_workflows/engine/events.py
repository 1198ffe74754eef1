"""Events and messages (DESIGN section 8.2): sending, matching waits to them, waking runs.

The matching rule. A run records ``event_watermark`` when it is created: the highest
``WorkflowEvent`` id stored then. A wait of the run consumes the oldest event of its
``(event, key)`` with a greater id that the run has not consumed yet (a ``WorkflowWait``
of the run points at each event it consumed). Ids are the database's order of rows:
on PostgreSQL, where sequence values may commit out of order, ``send_event`` holds a
transaction-level advisory lock from before its insert to its commit, so events commit in
id order and a watermark read in any snapshot divides them exactly into "stored before"
and "stored after"; SQLite serializes writers by itself.

Waking. The sender commits the event (or message) first and then looks for the runs
suspended at an open wait it matches: each is moved to ``running`` (guarded) and handed
to its executor (an inline run runs in the calling process, as ``resume_run`` does; the
rq executor's job goes out once the caller's transaction commits). A wait whose run
suspends after that look re-checks once suspended (the orchestrator's ``recheck``), so
no wake-up falls between the two. One lost anyway (a process killed between the commit
and the wake-up, Redis lost, or a send inside the caller's own transaction racing a run
that was just suspending) is re-driven by the recovery sweep from the rows
(``runs_with_news``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Coalesce

from ..declarations import check_name, shown
from ..exceptions import (
    WorkflowIdempotencyError,
    WorkflowRunStateError,
)
from ..models import WorkflowEvent, WorkflowMessage, WorkflowRun, WorkflowWait
from ..status import RunStatus, WaitKind, WaitOutcome
from ..types import RunId
from . import store
from .clock import clock
from .dispatch import get_executor
from .serialization import encoded_input

#: The key of PostgreSQL's transaction-level advisory lock that orders event commits
#: (an arbitrary constant: "pikku" + "ev" in ASCII).
EVENT_LOCK_KEY = 0x70696B6B7565


@dataclass(frozen=True)
class SendResult:
    """What ``send_event`` and ``send`` did.

    Attributes:
        id: The stored event's (or message's) id.
        woken: How many runs this call woke (0 for an idempotent replay).
        created: False when the idempotency key returned an earlier event or message.
    """

    id: int
    woken: int
    created: bool


# --- checks -------------------------------------------------------------------------------


def _checked_data(data: Any) -> Any:
    return json.loads(encoded_input(data, "data"))


# --- sending ------------------------------------------------------------------------------


def _order_event_commits() -> None:
    """Hold the lock that makes events commit in id order (PostgreSQL; see the module)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [EVENT_LOCK_KEY])
    else:
        _write_lock_first()


def send_event(event: str, data: Any = None, *, key: str | None = None,
               idempotency_key: str | None = None, sent_by: Any = None) -> SendResult:
    """Store an event and wake the runs waiting on ``(event, key)``.

    Raises:
        WorkflowInputError: A name, key or the data is invalid (nothing is written).
        WorkflowIdempotencyError: ``idempotency_key`` was used for another event.
    """
    check_name(event, "event")
    check_name(key, "key", optional=True)
    check_name(idempotency_key, "idempotency_key", optional=True)
    data = _checked_data(data)
    user_id = _user_id(sent_by)
    with transaction.atomic():
        _order_event_commits()
        earlier = _earlier_event(idempotency_key, event, key, data)
        if earlier is not None:
            return SendResult(id=earlier.pk, woken=0, created=False)
        try:
            with transaction.atomic():
                row = WorkflowEvent.objects.create(
                    event=event, key=key, data=data, idempotency_key=idempotency_key,
                    sent_by_id=user_id, created_at=clock().now())
        except IntegrityError:
            # Another process stored the same key first (outside the ordering lock's
            # reach only on SQLite's deferred reads): theirs stands.
            earlier = _earlier_event(idempotency_key, event, key, data)
            if earlier is None:
                raise
            return SendResult(id=earlier.pk, woken=0, created=False)
    return SendResult(id=row.pk, woken=wake_for_event(row), created=True)


def _earlier_event(idempotency_key: str | None, event: str, key: str | None,
                   data: Any) -> WorkflowEvent | None:
    if idempotency_key is None:
        return None
    earlier = WorkflowEvent.objects.filter(idempotency_key=idempotency_key).first()
    if earlier is None:
        return None
    if (earlier.event, earlier.key, earlier.data) != (event, key, data):
        raise WorkflowIdempotencyError(
            f"idempotency_key {shown(idempotency_key)} was already used for event "
            f"{earlier.pk} ('{earlier.event}', key {shown(earlier.key)}) with other "
            "content; nothing was sent")
    return earlier


def _user_id(user: Any) -> Any:
    if user is None or getattr(user, "is_anonymous", False):
        return None
    return getattr(user, "pk", user)


def _event_waits(row: WorkflowEvent) -> QuerySet[WorkflowWait]:
    waits = WorkflowWait.objects.filter(kind=WaitKind.EVENT, name=row.event,
                                        outcome__isnull=True)
    waits = waits.filter(key__isnull=True) if row.key is None else waits.filter(key=row.key)
    return waits.filter(Q(run__event_watermark__lt=row.pk) |
                        Q(run__event_watermark__isnull=True))


def _waiting_runs(row: WorkflowEvent) -> list[tuple[Any, bool]]:
    return list(_event_waits(row).filter(run__status=RunStatus.SUSPENDED)
                .values_list("run_id", "run__inline").distinct())


def wake_for_event(row: WorkflowEvent) -> int:
    """Wake the runs suspended at an open wait ``row`` matches; how many were woken."""
    return wake_runs(_waiting_runs(row))


def wake_runs(runs: list[tuple[Any, bool]],
              start: Callable[[Any, bool], None] | None = None) -> int:
    """Move each suspended run to ``running`` (guarded) and give it a pass.

    Args:
        runs: ``(run_id, inline)`` pairs.
        start: What gives a woken run its pass (default: its executor's ``enqueue_pass``;
            an inline run runs here).

    Returns:
        How many runs this call woke (another waker may have been first).
    """
    woken: list[tuple[Any, bool]] = []
    for run_id, inline in runs:
        if store.set_run_status(run_id, RunStatus.RUNNING, expected=(RunStatus.SUSPENDED,)):
            woken.append((run_id, inline))
    for run_id, inline in woken:
        (start or _enqueue)(run_id, inline)
    return len(woken)


def _enqueue(run_id: Any, inline: bool) -> None:
    get_executor(inline).enqueue_pass(run_id)


def send(run_id: RunId, data: Any = None, *, topic: str = "default",
         idempotency_key: str | None = None, sent_by: Any = None) -> SendResult:
    """Queue a message to a run on ``topic`` and wake the run if it waits for one.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished (409).
        WorkflowInputError: The topic, key or data is invalid (nothing is written).
        WorkflowIdempotencyError: ``idempotency_key`` was used for another message to
            this run.
    """
    check_name(topic, "topic")
    check_name(idempotency_key, "idempotency_key", optional=True)
    data = _checked_data(data)
    user_id = _user_id(sent_by)
    run = store.load_run(run_id)
    with transaction.atomic():
        run = store.lock_run(run.pk)  # a run finishing now waits for this commit
        earlier = _earlier_message(run, idempotency_key, topic, data)
        if earlier is not None:
            return SendResult(id=earlier.pk, woken=0, created=False)
        if run.is_terminal:
            raise WorkflowRunStateError(
                f"run {run.pk} is {run.status}: it receives no more messages")
        message = WorkflowMessage.objects.create(
            run=run, topic=topic, data=data, idempotency_key=idempotency_key,
            sent_by_id=user_id, created_at=clock().now())
    return SendResult(id=message.pk, woken=wake_runs(_message_waiters(run.pk, topic)),
                      created=True)


def _earlier_message(run: WorkflowRun, idempotency_key: str | None, topic: str,
                     data: Any) -> WorkflowMessage | None:
    if idempotency_key is None:
        return None
    earlier = WorkflowMessage.objects.filter(run=run, idempotency_key=idempotency_key).first()
    if earlier is None:
        return None
    if (earlier.topic, earlier.data) != (topic, data):
        raise WorkflowIdempotencyError(
            f"idempotency_key {shown(idempotency_key)} was already used for message "
            f"{earlier.pk} to run {run.pk} (topic '{earlier.topic}') with other content; "
            "nothing was sent", run_id=run.pk)
    return earlier


def _message_waiters(run_id: Any, topic: str) -> list[tuple[Any, bool]]:
    return list(WorkflowWait.objects.filter(
        run_id=run_id, kind=WaitKind.MESSAGE, name=topic, outcome__isnull=True,
        run__status=RunStatus.SUSPENDED).values_list("run_id", "run__inline").distinct())


# --- the waits (called by a run's pass, under its lease) -----------------------------------


@dataclass(frozen=True)
class WaitResult:
    """How a wait stands: ``ended`` with ``value`` (None on a timeout), or still open."""

    ended: bool
    value: Any = None


OPEN = WaitResult(ended=False)


def open_wait(run: WorkflowRun, step: str, kind: str, name: str, key: str | None,
              timeout_at: datetime | None) -> WorkflowWait:
    """The wait row of ``run``'s step ``step``, inserted the first time it is reached."""
    wait = WorkflowWait.objects.filter(run=run, step=step).first()
    if wait is not None:
        return wait
    try:
        with transaction.atomic():
            return WorkflowWait.objects.create(run=run, step=step, kind=kind, name=name,
                                               key=key, timeout_at=timeout_at,
                                               created_at=clock().now())
    except IntegrityError:
        return WorkflowWait.objects.get(run=run, step=step)


def _ended(wait: WorkflowWait) -> WaitResult:
    if wait.outcome == WaitOutcome.RECEIVED:
        if wait.event_id is not None:
            return WaitResult(True, WorkflowEvent.objects.filter(pk=wait.event_id)
                              .values_list("data", flat=True).first())
        if wait.message_id is not None:
            return WaitResult(True, WorkflowMessage.objects.filter(pk=wait.message_id)
                              .values_list("data", flat=True).first())
    return WaitResult(True, None)


def matching_events(run: WorkflowRun, event: str, key: str | None) -> QuerySet[WorkflowEvent]:
    """The events a wait of ``run`` on ``(event, key)`` may consume, oldest first."""
    events = WorkflowEvent.objects.filter(event=event)
    events = events.filter(key__isnull=True) if key is None else events.filter(key=key)
    if run.event_watermark is not None:
        events = events.filter(pk__gt=run.event_watermark)
    consumed = WorkflowWait.objects.filter(run_id=run.pk, event_id=OuterRef("pk"))
    return events.filter(~Exists(consumed)).order_by("pk")


def next_messages(run_id: Any, topic: str) -> QuerySet[WorkflowMessage]:
    """The messages to a run on ``topic`` not received yet, first in first out."""
    return WorkflowMessage.objects.filter(run_id=run_id, topic=topic,
                                          received_at__isnull=True).order_by("pk")


def _timed_out(wait: WorkflowWait) -> bool:
    return wait.timeout_at is not None and clock().now() >= wait.timeout_at


def _end(wait: WorkflowWait, outcome: str, **fields: Any) -> bool:
    """End the open wait (guarded); False if it had already ended."""
    return bool(WorkflowWait.objects.filter(pk=wait.pk, outcome__isnull=True).update(
        outcome=outcome, ended_at=clock().now(), **fields))


def _write_lock_first() -> None:
    """SQLite: take the write lock before the transaction's first read. A transaction
    that reads first cannot upgrade to a write once another process has committed: it
    fails at once with "database is locked", whatever the busy timeout."""
    if connection.vendor == "sqlite":
        WorkflowEvent.objects.filter(pk=-1).update(event="")


def receive_event(run: WorkflowRun, wait: WorkflowWait) -> WaitResult:
    """Consume the event the open wait matches, or time it out, or leave it open.

    An event already stored wins over a timeout that passed meanwhile.
    """
    if wait.outcome is not None:
        return _ended(wait)
    with transaction.atomic():
        _write_lock_first()
        row = matching_events(run, wait.name, wait.key).values_list("pk", "data").first()
        if row is not None:
            _end(wait, WaitOutcome.RECEIVED, event_id=row[0])
            return WaitResult(True, row[1])
        if _timed_out(wait) and _end(wait, WaitOutcome.TIMED_OUT):
            return WaitResult(True, None)
    return OPEN


def receive_message(run: WorkflowRun, wait: WorkflowWait) -> WaitResult:
    """Receive the oldest message the open wait matches, or time it out, or leave it open."""
    if wait.outcome is not None:
        return _ended(wait)
    with transaction.atomic():
        _write_lock_first()
        row = next_messages(run.pk, wait.name).values_list("pk", "data").first()
        if row is not None:
            now = clock().now()
            WorkflowMessage.objects.filter(pk=row[0], received_at__isnull=True).update(
                received_at=now, received_by=wait.step)
            _end(wait, WaitOutcome.RECEIVED, message_id=row[0])
            return WaitResult(True, row[1])
        if _timed_out(wait) and _end(wait, WaitOutcome.TIMED_OUT):
            return WaitResult(True, None)
    return OPEN


def time_out_suspend(wait: WorkflowWait) -> bool:
    """End a suspend's wait whose timeout passed; False if it has not (or had ended)."""
    return _timed_out(wait) and _end(wait, WaitOutcome.TIMED_OUT)


def news_for(run: WorkflowRun, wait: WorkflowWait) -> bool:
    """Whether the open wait could end now (what it waits for arrived, or its timeout
    passed): the recheck of a run that just suspended at it."""
    if _timed_out(wait):
        return True
    if wait.kind == WaitKind.EVENT:
        return matching_events(run, wait.name, wait.key).exists()
    if wait.kind == WaitKind.MESSAGE:
        return next_messages(run.pk, wait.name).exists()
    return False


def end_resumed_suspend(run_id: Any, step: str) -> None:
    """A resume opened the suspend gate ``step``: its wait is received."""
    WorkflowWait.objects.filter(run_id=run_id, step=step, outcome__isnull=True).update(
        outcome=WaitOutcome.RECEIVED, ended_at=clock().now())


def cancel_waits(run_id: Any) -> int:
    """End a finished run's open waits as ``cancelled``; how many were open."""
    return WorkflowWait.objects.filter(run_id=run_id, outcome__isnull=True).update(
        outcome=WaitOutcome.CANCELLED, ended_at=clock().now())


# --- the time keeper and recovery -----------------------------------------------------------


def due_timeouts(now: datetime, limit: int) -> list[tuple[Any, bool]]:
    """The suspended runs with an open wait whose timeout is at or before ``now``."""
    return list(WorkflowWait.objects.filter(
        outcome__isnull=True, timeout_at__lte=now, run__status=RunStatus.SUSPENDED,
    ).order_by("timeout_at").values_list("run_id", "run__inline")[:limit])


def next_timeout(after: datetime) -> datetime | None:
    """The earliest timeout of an open wait after ``after`` (None: none)."""
    moment: datetime | None = WorkflowWait.objects.filter(
        outcome__isnull=True, timeout_at__gt=after,
    ).order_by("timeout_at").values_list("timeout_at", flat=True).first()
    return moment


def runs_with_news(limit: int) -> list[tuple[Any, bool]]:
    """Suspended runs at an open wait that an event or message stored already matches:
    their wake-up was lost (a process died after the send committed, or Redis lost it)."""
    consumed = WorkflowWait.objects.filter(run_id=OuterRef(OuterRef("run_id")),
                                           event_id=OuterRef("pk"))
    events = WorkflowEvent.objects.filter(
        event=OuterRef("name"), pk__gt=Coalesce(OuterRef("run__event_watermark"), 0),
    ).filter(~Exists(consumed))
    messages = WorkflowMessage.objects.filter(run_id=OuterRef("run_id"), topic=OuterRef("name"),
                                              received_at__isnull=True)
    found = WorkflowWait.objects.filter(
        outcome__isnull=True, run__status=RunStatus.SUSPENDED,
    ).filter(
        Q(kind=WaitKind.EVENT, key__isnull=False) & Exists(events.filter(key=OuterRef("key")))
        | Q(kind=WaitKind.EVENT, key__isnull=True) & Exists(events.filter(key__isnull=True))
        | Q(kind=WaitKind.MESSAGE) & Exists(messages),
    )
    return list(found.values_list("run_id", "run__inline").distinct()[:limit])


# --- pikku_prune ----------------------------------------------------------------------------


def old_events(before: datetime) -> QuerySet[WorkflowEvent]:
    """The events stored before ``before`` that no live run can still consume: every
    run that is not finished and was created before the event has consumed it."""
    could_consume = WorkflowRun.objects.filter(
        status__in=(RunStatus.SCHEDULED, RunStatus.RUNNING, RunStatus.SUSPENDED),
    ).filter(
        Q(event_watermark__lt=OuterRef("pk")) | Q(event_watermark__isnull=True),
    ).exclude(
        Exists(WorkflowWait.objects.filter(run_id=OuterRef("pk"),
                                           event_id=OuterRef(OuterRef("pk")))),
    )
    return WorkflowEvent.objects.filter(created_at__lt=before).exclude(Exists(could_consume))


def old_messages(before: datetime) -> QuerySet[WorkflowMessage]:
    """The messages sent before ``before`` to runs that finished: nothing can receive
    them any more (a live run's messages stay, received or not)."""
    return WorkflowMessage.objects.filter(created_at__lt=before,
                                          run__status__in=RunStatus.terminal())


def prune(before: datetime, *, batch_size: int = 1000) -> tuple[int, int]:
    """Delete ``old_events(before)`` and ``old_messages(before)`` in batches.

    Returns:
        How many events and how many messages were deleted.
    """
    events = 0
    while ids := list(old_events(before).values_list("pk", flat=True)[:batch_size]):
        events += WorkflowEvent.objects.filter(pk__in=ids).delete()[0]
    messages = 0
    while ids := list(old_messages(before).values_list("pk", flat=True)[:batch_size]):
        messages += WorkflowMessage.objects.filter(pk__in=ids).delete()[0]
    return events, messages
