"""The scheduler: delayed starts, buffered ticks and schedule ticks, exactly once each."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import F, Q

from ..conf import pikku_settings
from ..durations import parse_duration
from ..engine import events, flow, lifecycle, store
from ..engine.cadence import Cadence, check_cadence
from ..engine.clock import clock
from ..engine.dispatch import get_executor
from ..engine.serialization import validated_input
from ..engine.versions import check_startable
from ..exceptions import WorkflowError, WorkflowInputError, WorkflowScheduleError
from ..models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from ..registry import NAME_MAX_LENGTH, ScheduleDefinition, registry
from ..status import RunStatus, ScheduleOverlap, ScheduleSource, TickStatus, TickTrigger

logger = logging.getLogger(__name__)

#: A tick not started within this many seconds of its time is late (DESIGN 8.1).
LATE_AFTER = 60.0
#: Past this many consecutive missed ticks, the rest of the gap is one row.
MAX_MISSED_ROWS = 100
#: The most ticks of one schedule one pass fires (the next pass goes on from there).
MAX_TICKS_PER_PASS = 500
#: The most due schedules, and due runs, one pass reads.
PASS_BATCH = 1000
#: The most due schedules one transaction of a pass fires.
FIRE_BATCH = 100
#: The shortest pause of a time keeper between two passes: a busy one (ticks due every
#: few milliseconds) passes about this often, not after every tick.
MIN_WAIT = 0.05
#: The most ticks one backfill may cover.
MAX_BACKFILL_TICKS = 1000
#: The longest schedule name: its runs' idempotency key (``schedule:<name>:<tick ISO>``)
#: must fit the run's ``idempotency_key`` column.
SCHEDULE_NAME_MAX_LENGTH = 150

#: What a pass does with a run it may start: ``start(run)``.
Starter = Callable[[WorkflowRun], None]
#: Gives a run woken from a wait its pass: ``(run_id, inline)``.
Waker = Callable[[Any, bool], None]

_LIVE = (RunStatus.RUNNING, RunStatus.SUSPENDED)


# --- declarations -----------------------------------------------------------------------


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise WorkflowScheduleError(
            f"a schedule name must be a non-empty string, not {name!r}", field="name")
    if len(name) > SCHEDULE_NAME_MAX_LENGTH:
        raise WorkflowScheduleError(
            f"the schedule name is {len(name)} characters long; the limit is "
            f"{SCHEDULE_NAME_MAX_LENGTH}", field="name")
    if "/" in name or any(not char.isprintable() for char in name):
        raise WorkflowScheduleError(
            f"the schedule name {name!r} must not contain '/' or control characters",
            field="name")
    return name


def validate_schedule(*, name: Any, workflow: Any, cron: str | None = None,
                      every: float | int | str | None = None, tz: str = "UTC",
                      input: Any = None, overlap: str = ScheduleOverlap.SKIP,
                      catchup: float | int | str = "0s", start_at: datetime | None = None,
                      end_at: datetime | None = None, paused: bool = False,
                      origin: str = "") -> ScheduleDefinition:
    """Check a schedule's fields (code or admin alike) and return them normalized.

    ``workflow`` may be the registered name or the decorated function. The input goes
    through the workflow's input serializer, as a start's does.

    Raises:
        WorkflowScheduleError: ``INVALID_SCHEDULE`` naming the field at fault (``field``).
    """
    name = _check_name(name)
    workflow_name = workflow if isinstance(workflow, str) else (
        getattr(workflow, "__pikku_name__", None) or getattr(workflow, "name", None))
    if not isinstance(workflow_name, str) or len(workflow_name) > NAME_MAX_LENGTH:
        raise WorkflowScheduleError(
            f"schedule '{name}': workflow must be a registered workflow's name, not "
            f"{workflow!r}", field="workflow")
    definition = registry.find_workflow(workflow_name)
    if definition is None:
        raise WorkflowScheduleError(
            f"schedule '{name}': no workflow is registered as '{workflow_name}'",
            field="workflow")
    try:
        cadence = check_cadence(cron=cron, every=every, tz=tz, start_at=start_at,
                                end_at=end_at)
    except WorkflowScheduleError as exc:
        raise WorkflowScheduleError(f"schedule '{name}': {exc}", field=exc.field) from None
    if overlap not in ScheduleOverlap.values:
        raise WorkflowScheduleError(
            f"schedule '{name}': overlap {overlap!r} is not one of "
            f"{', '.join(ScheduleOverlap.values)}", field="overlap")
    try:
        catchup_seconds = parse_duration(catchup, what="catchup")
    except ValueError as exc:
        raise WorkflowScheduleError(f"schedule '{name}': {exc}", field="catchup") from None
    if not isinstance(paused, bool):
        raise WorkflowScheduleError(
            f"schedule '{name}': paused must be True or False, not {paused!r}", field="paused")
    try:
        data = validated_input(definition, input)
    except WorkflowInputError as exc:
        detail = f" ({exc.errors})" if getattr(exc, "errors", None) else ""
        raise WorkflowScheduleError(f"schedule '{name}': {exc}{detail}",
                                    field="input") from None
    return ScheduleDefinition(
        name=name, workflow=workflow_name, cron=cadence.cron, every=cadence.every,
        tz=cadence.tz, input=data, overlap=str(overlap), catchup=catchup_seconds,
        start_at=cadence.start_at, end_at=cadence.end_at, paused=paused, origin=origin)


def cadence_of(schedule: WorkflowSchedule | ScheduleDefinition) -> Cadence:
    """The ``Cadence`` of a schedule row or declaration."""
    return Cadence(cron=schedule.cron, every=schedule.every, tz=schedule.tz,
                   start_at=schedule.start_at, end_at=schedule.end_at)


def _first_fire(schedule: WorkflowSchedule | ScheduleDefinition,
                now: datetime) -> datetime | None:
    return cadence_of(schedule).first_from(now)


def schedule_fields(definition: ScheduleDefinition, *,
                    now: datetime | None = None) -> dict[str, Any]:
    """The ``WorkflowSchedule`` fields of a validated schedule (``validate_schedule``'s
    result), ``next_fire_at`` included (its first tick at or after ``now``): what an admin
    form or the API saves for a schedule it creates, or whose timing it changes."""
    fields = {k: v for k, v in asdict(definition).items() if k != "origin"}
    fields["next_fire_at"] = _first_fire(definition, now or clock().now())
    return fields


_TIMING = ("cron", "every", "tz", "start_at", "end_at")
_SYNCED = ("workflow", *_TIMING, "input", "overlap", "catchup")


def sync_schedules() -> dict[str, list[str]]:
    """Make the ``source=code`` schedule rows match the declared schedules.

    Declared schedules missing a row are added (their first tick is the first at or after
    now); changed ones are updated (a change of timing recomputes the next tick; ``paused``
    is the operator's once the row exists); rows of schedules no longer declared are
    deleted with their ticks (their runs stay). A row created in the admin
    (``source=admin``) is never changed: a declaration of the same name is reported in
    ``conflicts`` and ignored.

    Returns:
        ``{"added": [...], "changed": [...], "removed": [...], "conflicts": [...]}``.
    """
    now = clock().now()
    report: dict[str, list[str]] = {"added": [], "changed": [], "removed": [],
                                    "conflicts": []}
    declared = {d.name: d for d in registry.schedules()}
    with transaction.atomic():
        rows = {row.name: row for row in WorkflowSchedule.objects.select_for_update()
                .filter(name__in=list(declared))}
        for name, definition in declared.items():
            row = rows.get(name)
            if row is None:
                try:
                    with transaction.atomic():
                        WorkflowSchedule.objects.create(
                            **schedule_fields(definition, now=now),
                            source=ScheduleSource.CODE)
                except IntegrityError:
                    continue  # another process starting at the same time added it
                report["added"].append(name)
                continue
            if row.source != ScheduleSource.CODE:
                report["conflicts"].append(name)
                logger.warning("schedule %r is declared in code and was created in the "
                               "admin: the admin's row is kept", name)
                continue
            changed = [f for f in _SYNCED if getattr(row, f) != getattr(definition, f)]
            if not changed:
                continue
            for field in changed:
                setattr(row, field, getattr(definition, field))
            if any(f in _TIMING for f in changed):
                row.next_fire_at = _first_fire(row, now)
                changed.append("next_fire_at")
            row.save(update_fields=[*changed, "updated_at"])
            report["changed"].append(name)
        removed = WorkflowSchedule.objects.filter(source=ScheduleSource.CODE).exclude(
            name__in=list(declared))
        report["removed"] = sorted(removed.values_list("name", flat=True))
        removed.delete()
    return report


# --- reading ------------------------------------------------------------------------------


def get_schedule(name: str) -> WorkflowSchedule:
    """The schedule named ``name``.

    Raises:
        WorkflowScheduleError: ``SCHEDULE_NOT_FOUND``.
    """
    schedule = WorkflowSchedule.objects.filter(name=name).first() \
        if isinstance(name, str) else None
    if schedule is None:
        shown = name if isinstance(name, str) and len(name) <= 200 else repr(name)[:200]
        raise WorkflowScheduleError(f"no schedule is named '{shown}'",
                                    code="SCHEDULE_NOT_FOUND")
    return schedule


def next_fire_times(schedule: WorkflowSchedule | str, count: int = 5) -> list[datetime]:
    """The next ``count`` ticks of a schedule (UTC), from its next owed tick or now;
    empty when it has ended. A paused schedule lists when it would fire."""
    row = get_schedule(schedule) if isinstance(schedule, str) else schedule
    cadence = cadence_of(row)
    now = clock().now()
    start = now if row.paused or row.next_fire_at is None else min(row.next_fire_at, now)
    ticks: list[datetime] = []
    for tick in cadence.ticks_after(start - timedelta(microseconds=1)):
        if len(ticks) >= count:
            break
        ticks.append(tick)
    return ticks


# --- the pass -----------------------------------------------------------------------------


def _lock_schedule(pk: int) -> WorkflowSchedule | None:
    """The schedule row under a row lock (SQLite: the database's write lock)."""
    if connection.vendor == "sqlite":
        WorkflowSchedule.objects.filter(pk=pk).update(paused=F("paused"))
    return WorkflowSchedule.objects.select_for_update().filter(pk=pk).first()


def start_run(run: WorkflowRun) -> None:
    """Hand a run that just became ``running`` to its executor (an inline run runs here)."""
    get_executor(run.inline).enqueue_pass(run.pk, new_run=run, workflow=run.workflow)


def _run_key(schedule: WorkflowSchedule, tick_at: datetime) -> str:
    return f"schedule:{schedule.name}:{tick_at.astimezone(UTC).isoformat()}"


def _run_fields(schedule: WorkflowSchedule, tick_at: datetime, trigger: str, *,
                batch: _TickBatch, actor: Any = None) -> dict[str, Any]:
    """The fields of a tick's run (raises what a start raises: unknown workflow, a
    declined version, input its serializer refuses)."""
    definition = registry.workflow(schedule.workflow)
    if definition.name not in batch.startable:  # its version is read once a batch
        check_startable(definition)
        batch.startable.add(definition.name)
    data = validated_input(definition, schedule.input)
    concurrency = flow.concurrency_of(definition)
    # A key missing from the schedule's input: the tick says so (as start_workflow would).
    key = None if concurrency is None else flow.key_for(concurrency, data, definition.name)
    analysis = definition.analysis
    wire: dict[str, Any] = {"type": "schedule", "schedule": schedule.name, "trigger": trigger}
    if actor is not None:
        wire["user"] = getattr(actor, "pk", actor)
    return dict(
        workflow=schedule.workflow, input=data,
        inline=pikku_settings.EXECUTOR == "inline",
        graph_hash=analysis.graph_hash, deterministic=analysis.deterministic,
        planned_steps=analysis.planned_steps, wire=wire,
        idempotency_key=_run_key(schedule, tick_at), schedule=schedule,
        scheduled_at=tick_at, concurrency_key=key, run_timeout=flow.timeout_of(definition))


class _TickBatch:
    """The ticks of one transaction: the live and buffered runs of its schedules, read
    once and kept current as its ticks start and cancel runs, and the rows its ticks
    write, inserted together by ``flush`` (a due second of many schedules costs a few
    statements, not a transaction each)."""

    def __init__(self, schedule_ids: list[int]) -> None:
        self.live: dict[int, list[tuple[Any, str]]] = {pk: [] for pk in schedule_ids}
        self.buffered: dict[int, Any] = dict.fromkeys(schedule_ids)
        self.runs: list[WorkflowRun] = []
        self.ticks: list[WorkflowScheduleTick] = []
        self.startable: set[str] = set()
        rows = WorkflowRun.objects.filter(schedule_id__in=schedule_ids).filter(
            Q(status__in=_LIVE) | Q(status=RunStatus.SCHEDULED, start_at__isnull=True)
        ).order_by("created_at").values_list("schedule_id", "pk", "status")
        for schedule_id, pk, status in rows:
            if status != RunStatus.SCHEDULED:
                self.live[schedule_id].append((pk, status))
            elif self.buffered[schedule_id] is None:
                self.buffered[schedule_id] = pk

    def flush_runs(self) -> None:
        """Insert the runs written so far (a concurrency decision counts them)."""
        store.insert_runs(self.runs)
        self.runs = []

    def flush(self) -> list[WorkflowScheduleTick]:
        """Insert the runs, then the ticks; returns the ticks."""
        self.flush_runs()
        ticks = WorkflowScheduleTick.objects.bulk_create(self.ticks) if self.ticks else []
        self.runs, self.ticks = [], []
        return ticks


def _fire(schedule: WorkflowSchedule, tick_at: datetime, trigger: str, *,
          batch: _TickBatch, actor: Any = None,
          started: list[WorkflowRun]) -> WorkflowScheduleTick:
    """Decide one tick (and its run) under the overlap policy, its rows written by
    ``batch.flush()``; the caller holds the schedule's lock.

    Runs to start once the transaction commits are appended to ``started``.
    """
    tick = WorkflowScheduleTick(schedule=schedule, tick_at=tick_at, trigger=trigger,
                                created_at=clock().now())
    live = batch.live[schedule.pk]
    buffered = batch.buffered[schedule.pk]
    busy = bool(live) or buffered is not None
    policy = schedule.overlap
    status: str = RunStatus.RUNNING
    fields: dict[str, Any] | None = None
    if busy and policy == ScheduleOverlap.SKIP:
        tick.status = TickStatus.SKIPPED
        previous = f"run {live[0][0]} is still {live[0][1]}" if live else \
            f"run {buffered} is still waiting"
        tick.detail = f"overlap skip: the previous {previous}"
    elif busy and policy == ScheduleOverlap.BUFFER_ONE and buffered is not None:
        tick.status = TickStatus.SKIPPED
        tick.detail = f"overlap buffer_one: run {buffered} is already buffered"
    else:
        try:
            fields = _run_fields(schedule, tick_at, trigger, batch=batch, actor=actor)
        except WorkflowError as exc:
            # Never silent: the tick says why it started nothing (and ends no run).
            tick.status = TickStatus.SKIPPED
            tick.detail = f"could not start workflow '{schedule.workflow}': {exc}"
    if fields is not None and busy and policy == ScheduleOverlap.BUFFER_ONE:
        status = RunStatus.SCHEDULED
        tick.status = TickStatus.BUFFERED
        tick.detail = (f"overlap buffer_one: starts when run {live[0][0]} "
                       f"(now {live[0][1]}) ends")
    elif fields is not None:
        tick.status = TickStatus.STARTED
        if busy and policy == ScheduleOverlap.CANCEL_PREVIOUS:
            ended = []
            for pk in [pk for pk, _ in live] + ([buffered] if buffered else []):
                try:
                    lifecycle.cancel_run(pk, f"schedule '{schedule.name}': the tick of "
                                             f"{tick_at.isoformat()} replaces it "
                                             "(overlap cancel_previous)")
                    ended.append(str(pk))
                except WorkflowError:
                    pass  # it ended meanwhile
            live.clear()
            batch.buffered[schedule.pk] = None
            if ended:
                tick.detail = f"overlap cancel_previous: cancelled run {', '.join(ended)}"
    admission: flow.Admission | None = None
    if fields is not None and status == RunStatus.RUNNING:
        admission = _admit(fields, tick, started, batch)
        status = admission.status if admission is not None else status
    if fields is not None:
        timeout = fields["run_timeout"]
        if status != RunStatus.SCHEDULED or admission is not None:
            # Its clock starts now (waiting for a concurrency slot counts, as for a
            # start_workflow); a buffered run's when it is promoted.
            fields["deadline_at"] = None if timeout is None else clock().after(timeout)
        tick.run = run = store.new_run(**fields, status=status)
        batch.runs.append(run)
        if status == RunStatus.RUNNING:
            live.append((run.pk, status))
            started.append(run)
        elif status == RunStatus.SCHEDULED:
            batch.buffered[schedule.pk] = run.pk
        if admission is not None:
            # Inserted now: the next tick's decision for the key counts this run.
            batch.flush_runs()
            for cancelled in admission.cancelled:
                lifecycle.after_status_change(cancelled, RunStatus.CANCELLED)
    if actor is not None:
        who = getattr(actor, "get_username", None)
        tick.detail = (tick.detail + "; " if tick.detail else "") + \
            f"by {who() if callable(who) else actor}"
    batch.ticks.append(tick)
    return tick


def _admit(fields: dict[str, Any], tick: WorkflowScheduleTick, started: list[WorkflowRun],
           batch: _TickBatch) -> flow.Admission | None:
    """A tick's run of a workflow with ``Concurrency``: admitted as ``start_workflow``
    admits a start (queue, skip or cancel_running), under its key's lock (the tick's
    transaction); its run's fields and the tick's detail are set to match. None: the
    workflow declares no concurrency."""
    key = fields["concurrency_key"]
    if key is None:
        return None
    name = fields["workflow"]
    concurrency = flow.concurrency_of(registry.workflow(name))
    if concurrency is None:
        return None
    batch.flush_runs()  # the runs of earlier ticks hold or wait for slots of the key too
    admission = flow.admit(name, key, concurrency)
    started.extend(admission.promoted)
    now = clock().now()
    if admission.status == RunStatus.SCHEDULED:
        fields.update(flow.waiting_fields(now))
        note = f"waits for a concurrency slot of {name} (key {key!r})"
    elif admission.status == RunStatus.CANCELLED:
        fields.update(error=flow.skipped_error(name, key, concurrency.max), finished_at=now)
        tick.status = TickStatus.SKIPPED
        note = f"concurrency on_full skip: every slot of key {key!r} is held"
    elif admission.cancelled:
        note = (f"concurrency on_full cancel_running: cancelled run "
                f"{', '.join(str(run.pk) for run in admission.cancelled)}")
    else:
        return admission
    tick.detail = (tick.detail + "; " if tick.detail else "") + note
    return admission


def _missed_rows(schedule: WorkflowSchedule, cadence: Cadence, first: datetime,
                 before: datetime, now: datetime) -> list[WorkflowScheduleTick]:
    """The ``missed`` rows of the ticks from ``first`` to before ``before``: one each up
    to ``MAX_MISSED_ROWS``, then one row for the rest of the gap."""
    detail = (f"not started within {_seconds(schedule.catchup)} catch-up + 1 min of its "
              f"time: no scheduler pass ran until {now.isoformat()}")
    last = before - timedelta(microseconds=1)
    rows: list[WorkflowScheduleTick] = []
    ticks: Iterator[datetime] = cadence.between(first, last)
    for tick_at in ticks:
        if len(rows) == MAX_MISSED_ROWS:
            rest = cadence.count_between(tick_at, last)
            until = tick_at
            if schedule.every is not None:
                step = timedelta(microseconds=round(schedule.every * 1_000_000))
                until = tick_at + step * (rest - 1)
            else:
                for until in ticks:  # noqa: B007 - the last one counts
                    pass
            rows.append(WorkflowScheduleTick(
                schedule=schedule, tick_at=tick_at, status=TickStatus.MISSED,
                trigger=TickTrigger.CATCHUP, missed_until=until, missed_count=rest,
                detail=f"{rest} ticks from {tick_at.isoformat()} to {until.isoformat()} "
                       f"{detail}", created_at=now))
            break
        rows.append(WorkflowScheduleTick(
            schedule=schedule, tick_at=tick_at, status=TickStatus.MISSED,
            trigger=TickTrigger.CATCHUP, missed_count=1, detail=detail, created_at=now))
    return rows


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _lock_due(pks: list[int], now: datetime) -> list[WorkflowSchedule]:
    """The due schedules among ``pks`` under row locks, in ``pks``' order. On PostgreSQL a
    row another scheduler holds is skipped (it is firing it), so time keepers share a
    busy second instead of queueing on each other's locks; SQLite locks the database."""
    if connection.vendor == "sqlite":
        WorkflowSchedule.objects.filter(pk__in=pks).update(paused=F("paused"))
    rows = {row.pk: row for row in WorkflowSchedule.objects.select_for_update(
        skip_locked=True).filter(pk__in=pks, paused=False, next_fire_at__lte=now)}
    return [rows[pk] for pk in pks if pk in rows]


def _fire_due(pks: list[int], now: datetime,
              started: list[WorkflowRun]) -> list[WorkflowScheduleTick]:
    """Write the due ticks of these schedules in one transaction under their locks."""
    with transaction.atomic():
        schedules = _lock_due(pks, now)  # another scheduler may have done some first
        batch = _TickBatch([schedule.pk for schedule in schedules])
        # A tick already written (a manual trigger at that instant, a row restored) is
        # passed over, never written again: its insert would fail the schedule each pass.
        written_before = set(WorkflowScheduleTick.objects.filter(
            schedule__in=schedules, tick_at__lte=now,
            tick_at__gte=min((s.next_fire_at for s in schedules if s.next_fire_at),
                             default=now),
        ).values_list("schedule_id", "tick_at")) if schedules else set()
        missed: list[WorkflowScheduleTick] = []
        for schedule in schedules:
            cadence = cadence_of(schedule)
            fired = 0
            first: datetime | None = schedule.next_fire_at
            window_start = now - timedelta(seconds=schedule.catchup + LATE_AFTER)
            if first is not None and first < window_start:
                rows = [row for row in _missed_rows(schedule, cadence, first, window_start, now)
                        if (schedule.pk, row.tick_at) not in written_before]
                missed += rows
                fired += len(rows)
                first = cadence.first_from(window_start)
            last: datetime | None = None
            if first is not None:
                for tick_at in cadence.between(first, now):
                    if fired >= MAX_TICKS_PER_PASS:
                        break
                    last = tick_at
                    if (schedule.pk, tick_at) in written_before:
                        continue
                    late = (now - tick_at).total_seconds() > LATE_AFTER
                    trigger = TickTrigger.CATCHUP if late else TickTrigger.CRON
                    _fire(schedule, tick_at, trigger, batch=batch, started=started)
                    fired += 1
            schedule.next_fire_at = cadence.next_after(last or now)
            schedule.updated_at = now
        written = WorkflowScheduleTick.objects.bulk_create(missed) if missed else []
        written += batch.flush()
        _save_next_fires(schedules)
    return written


def _save_next_fires(schedules: list[WorkflowSchedule]) -> None:
    """Write each schedule's ``next_fire_at`` and ``updated_at``: one statement run for
    every row (``bulk_update``'s CASE expression costs more to build than the pass's
    other work together)."""
    if not schedules:
        return
    meta = WorkflowSchedule._meta
    next_fire, updated = meta.get_field("next_fire_at"), meta.get_field("updated_at")
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {quote(meta.db_table)} SET {quote(next_fire.attname)} = %s, "  # noqa: S608
            f"{quote(updated.attname)} = %s WHERE {quote(meta.pk.attname)} = %s",
            [(next_fire.get_db_prep_value(row.next_fire_at, connection),
              updated.get_db_prep_value(row.updated_at, connection), row.pk)
             for row in schedules])


def _promote_delayed(now: datetime, start: Starter) -> int:
    """Start the ``scheduled`` runs whose ``start_at`` has come."""
    due = list(WorkflowRun.objects.filter(status=RunStatus.SCHEDULED, start_at__lte=now)
               .order_by("start_at")[:PASS_BATCH])
    count = 0
    for run in due:
        concurrency = None if run.concurrency_key is None else \
            flow.concurrency_of(registry.find_workflow(run.workflow))
        if concurrency is not None:
            # Its start time came: it queues for a slot of its key (DESIGN 8.4).
            promoted = flow.arrive(run, concurrency.max, now)
            for each in promoted:
                start(each)
            count += len(promoted)
        elif flow.promote(run, now, due=True):  # one time keeper wins each run
            if run.debounce_key is not None:
                run.refresh_from_db()  # the last debounced start's input
            start(run)
            count += 1
    return count


def _fill_queues(start: Starter) -> int:
    """The safety net of concurrency slots: start the queued runs of every key with a
    free slot (a holder's end does it at once; this covers a process that died between
    the end and the start, and slots freed by an operator's action)."""
    keys = list(WorkflowRun.objects.filter(
        status=RunStatus.SCHEDULED, waiting_for=flow.WAITING_CONCURRENCY,
    ).order_by().values_list("workflow", "concurrency_key").distinct()[:PASS_BATCH])
    # One query counts every key's holders: only the keys with a free slot are locked
    # and filled (a busy key, the usual case, costs nothing more).
    held = flow.holder_counts([(workflow, key) for workflow, key in keys if key is not None])
    count = 0
    for workflow, key in keys:
        concurrency = flow.concurrency_of(registry.find_workflow(workflow))
        if concurrency is None or key is None:
            continue  # not declared in this process (a rolling deploy): left waiting
        if held.get((workflow, key), 0) >= concurrency.max:
            continue
        for run in flow.release(workflow, key, concurrency.max):
            start(run)
            count += 1
    return count


def _expire_deadlines(now: datetime) -> int:
    """Fail the live runs past their deadline that no pass holds (DESIGN 8.4)."""
    due = list(WorkflowRun.objects.filter(
        deadline_at__lte=now,
        status__in=(RunStatus.SCHEDULED, RunStatus.RUNNING, RunStatus.SUSPENDED),
    ).order_by("deadline_at")[:PASS_BATCH])
    count = 0
    for run in due:
        if flow.expire(run, now):
            lifecycle.after_status_change(run, RunStatus.FAILED)
            count += 1
    return count


def _promote_buffered(start: Starter) -> int:
    """Start the buffered tick runs whose schedule's previous run has ended (or whose
    schedule was deleted: nothing is left to wait for)."""
    waiting = list(WorkflowRun.objects.filter(
        status=RunStatus.SCHEDULED, start_at__isnull=True, waiting_for="",
    ).order_by("created_at").values_list("pk", "schedule_id")[:PASS_BATCH])
    count = 0
    now = clock().now()
    for run_id, schedule_id in waiting:
        with transaction.atomic():
            if schedule_id is not None and _lock_schedule(schedule_id) is not None and \
                    WorkflowRun.objects.filter(schedule_id=schedule_id,
                                               status__in=_LIVE).exists():
                continue
            run = WorkflowRun.objects.filter(pk=run_id).first()
            if run is None:
                continue
            concurrency = None if run.concurrency_key is None else \
                flow.concurrency_of(registry.find_workflow(run.workflow))
            if concurrency is not None:
                # Its turn came: it queues for a slot of its key, as a new start would.
                promoted = flow.arrive(run, concurrency.max, now, buffered=True)
            else:
                promoted = [run] if flow.promote(run, now) else []
        for each in promoted:
            start(each)
        count += len(promoted)
    return count


def _end_due_waits(now: datetime, wake: Waker | None) -> int:
    """Wake the suspended runs with an open wait (event, message, suspend) whose timeout
    has passed: their pass ends the wait with None."""
    return events.wake_runs(events.due_timeouts(now, PASS_BATCH), wake)


def scheduler_pass(*, now: datetime | None = None, start: Starter | None = None,
                   wake: Waker | None = None, ticks_only: bool = False
                   ) -> list[WorkflowScheduleTick]:
    """One pass of the time keeper: end the waits whose timeout passed, fail the runs
    past their deadline, start due delayed (and debounced) runs, start buffered tick runs
    whose previous run ended and queued runs with a free concurrency slot, and write every due
    schedule tick (exactly once each, whatever the number of schedulers running).

    Args:
        now: The pass's time (default: the engine clock's).
        start: What to do with each run that starts (default: hand it to its executor;
            an inline run runs in this process).
        wake: What to do with each waiting run woken by its timeout, given its id and
            whether it is inline (default: its executor's next pass; an inline run runs
            in this process).
        ticks_only: Write the due ticks only (a time keeper's passes between two whole
            ones, when ticks fall due sooner than its interval).

    Returns:
        The ticks written, in the order written.
    """
    now = now or clock().now()
    start = start or start_run
    if not ticks_only:
        _end_due_waits(now, wake)
        _expire_deadlines(now)
        _promote_delayed(now, start)
        _promote_buffered(start)
        _fill_queues(start)
    due = list(WorkflowSchedule.objects.filter(paused=False, next_fire_at__lte=now)
               .order_by("next_fire_at").values_list("pk", flat=True)[:PASS_BATCH])
    ticks: list[WorkflowScheduleTick] = []
    for first in range(0, len(due), FIRE_BATCH):
        ticks += _fire_batch(due[first:first + FIRE_BATCH], now, start)
    return ticks


def _fire_batch(pks: list[int], now: datetime, start: Starter) -> list[WorkflowScheduleTick]:
    """Fire these due schedules together; if that fails, each alone, so that one
    schedule's failure never holds up the others."""
    started: list[WorkflowRun] = []
    try:
        ticks = _fire_due(pks, now, started)
    except Exception as exc:
        if len(pks) > 1:
            return [tick for pk in pks for tick in _fire_batch([pk], now, start)]
        if isinstance(exc, IntegrityError):
            # A tick row or run key already there: written by another scheduler.
            logger.warning("scheduler: schedule %s: a due tick is already written", pks[0])
        else:
            logger.exception("scheduler: schedule %s failed this pass", pks[0])
        return []
    for run in started:
        start(run)
    return ticks


def next_due(after: datetime) -> datetime | None:
    """The earliest moment after ``after`` at which something falls due (a tick of an
    active schedule, a delayed start or a wait's timeout); None: nothing is waiting."""
    moments = [
        events.next_timeout(after),
        WorkflowSchedule.objects.filter(paused=False, next_fire_at__gt=after)
        .order_by("next_fire_at").values_list("next_fire_at", flat=True).first(),
        WorkflowRun.objects.filter(status=RunStatus.SCHEDULED, start_at__gt=after)
        .order_by("start_at").values_list("start_at", flat=True).first(),
        WorkflowRun.objects.filter(
            deadline_at__gt=after,
            status__in=(RunStatus.SCHEDULED, RunStatus.RUNNING, RunStatus.SUSPENDED),
        ).order_by("deadline_at").values_list("deadline_at", flat=True).first(),
    ]
    present = [m for m in moments if m is not None]
    return min(present) if present else None


# --- operations ---------------------------------------------------------------------------


def trigger_schedule(name: str, *, actor: Any = None,
                     start: Starter | None = None) -> WorkflowScheduleTick:
    """Fire a schedule now (trigger ``manual``), under its overlap policy.

    Raises:
        WorkflowScheduleError: ``SCHEDULE_NOT_FOUND``.
    """
    pk = get_schedule(name).pk
    started: list[WorkflowRun] = []
    with transaction.atomic():
        schedule = _lock_schedule(pk)
        if schedule is None:
            raise WorkflowScheduleError(f"no schedule is named '{name}'",
                                        code="SCHEDULE_NOT_FOUND")
        tick_at = clock().now()
        # A manual tick never takes the instant of another tick of the schedule.
        while WorkflowScheduleTick.objects.filter(schedule=schedule, tick_at=tick_at).exists():
            tick_at += timedelta(microseconds=1)
        batch = _TickBatch([schedule.pk])
        tick = _fire(schedule, tick_at, TickTrigger.MANUAL, batch=batch, actor=actor,
                     started=started)
        batch.flush()
    for run in started:
        (start or start_run)(run)
    return tick


def _set_paused(name: str, paused: bool) -> WorkflowSchedule:
    pk = get_schedule(name).pk
    with transaction.atomic():
        schedule = _lock_schedule(pk)
        if schedule is None:
            raise WorkflowScheduleError(f"no schedule is named '{name}'",
                                        code="SCHEDULE_NOT_FOUND")
        schedule.paused = paused
        if not paused:
            # The ticks of a pause are not owed: the next is the first from now.
            schedule.next_fire_at = _first_fire(schedule, clock().now())
        schedule.save(update_fields=["paused", "next_fire_at", "updated_at"])
    return schedule


def pause_schedule(name: str, *, actor: Any = None) -> WorkflowSchedule:
    """Pause a schedule: no tick fires until it is resumed (manual triggers still do).

    Raises:
        WorkflowScheduleError: ``SCHEDULE_NOT_FOUND``.
    """
    return _set_paused(name, True)


def resume_schedule(name: str, *, actor: Any = None) -> WorkflowSchedule:
    """Resume a paused schedule from its first tick at or after now (the ticks of the
    pause are not owed, so none is recorded missed).

    Raises:
        WorkflowScheduleError: ``SCHEDULE_NOT_FOUND``.
    """
    return _set_paused(name, False)


def backfill_schedule(name: str, start: datetime, end: datetime, *, actor: Any = None,
                      starter: Starter | None = None) -> list[WorkflowScheduleTick]:
    """Fire the ticks of a schedule's cadence from ``start`` to ``end`` (both included,
    trigger ``backfill``), in order, each under the overlap policy (each run is handed to
    its executor before the next tick is decided). Ticks that already have a row are left
    as they are.

    Returns:
        Every tick created: started, skipped or buffered.

    Raises:
        WorkflowScheduleError: ``SCHEDULE_NOT_FOUND``; ``INVALID_SCHEDULE`` when ``start``
            or ``end`` is not an aware datetime, ``end`` is before ``start`` or in the
            future, or the range holds more than ``MAX_BACKFILL_TICKS`` ticks.
    """
    schedule = get_schedule(name)
    for field, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise WorkflowScheduleError(
                f"backfill {field} must be an aware datetime, not {value!r}", field=field)
    if end < start:
        raise WorkflowScheduleError(
            f"backfill end {end.isoformat()} is before its start {start.isoformat()}",
            field="end")
    if end > clock().now():
        raise WorkflowScheduleError(
            f"backfill end {end.isoformat()} is in the future", field="end")
    cadence = cadence_of(schedule)
    count = cadence.count_between(start, end)
    if count > MAX_BACKFILL_TICKS:
        raise WorkflowScheduleError(
            f"the backfill covers {count} ticks; the limit is {MAX_BACKFILL_TICKS}",
            field="end")
    written: list[WorkflowScheduleTick] = []
    for tick_at in list(cadence.between(start, end)):
        started: list[WorkflowRun] = []
        with transaction.atomic():
            locked = _lock_schedule(schedule.pk)
            if locked is None:
                raise WorkflowScheduleError(f"no schedule is named '{name}'",
                                            code="SCHEDULE_NOT_FOUND")
            if WorkflowScheduleTick.objects.filter(schedule=locked, tick_at=tick_at).exists():
                continue
            batch = _TickBatch([locked.pk])
            _fire(locked, tick_at, TickTrigger.BACKFILL, batch=batch, actor=actor,
                  started=started)
            written += batch.flush()
        for run in started:
            (starter or start_run)(run)
    return written


def old_ticks(before: datetime) -> Any:
    """The ticks before ``before`` that ``prune_ticks`` deletes: those without a run (a
    skipped or missed tick, or one whose run was deleted); a tick of a kept run stays."""
    return WorkflowScheduleTick.objects.filter(tick_at__lt=before, run__isnull=True)


def prune_ticks(before: datetime, *, batch_size: int = 1000) -> int:
    """Delete ``old_ticks(before)`` in batches (short transactions on a big table).

    Returns:
        How many ticks were deleted.
    """
    deleted = 0
    while ids := list(old_ticks(before).values_list("pk", flat=True)[:batch_size]):
        deleted += WorkflowScheduleTick.objects.filter(pk__in=ids).delete()[0]
    return deleted


# --- the time keeper loop -----------------------------------------------------------------


#: How long a time keeper's pool thread follows one inline run (its short sleeps included)
#: before leaving it to the recovery sweep, which continues it when its wake-up is due.
FOLLOW_SECONDS = 60.0


def _continue_inline(run_id: Any) -> None:
    try:
        get_executor(True).enqueue_pass(run_id, deadline=clock().after(FOLLOW_SECONDS))
    except TimeoutError:
        pass  # waiting longer: the sweep wakes it when it is due
    finally:
        connection.close()


class TimeKeeper:
    """Runs ``scheduler_pass`` every ``interval`` seconds until stopped (inside every
    ``pikku_worker`` on a daemon thread; alone in ``pikku_scheduler``).

    Inline runs it starts continue on a pool of ``threads`` threads, so one run's sleep
    never holds up the loop; other runs go to their executor.
    """

    def __init__(self, interval: float = 0.5, *, threads: int = 4) -> None:
        self.interval = interval
        self._pool = ThreadPoolExecutor(max_workers=max(threads, 1),
                                        thread_name_prefix="pikku-inline")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def starter(self, run: WorkflowRun) -> None:
        """Hand a run the pass made ``running`` on: an inline one to the pool."""
        if run.inline:
            self._pool.submit(_continue_inline, run.pk)
        else:
            start_run(run)

    def waker(self, run_id: Any, inline: bool) -> None:
        """Give a run woken from a wait its pass: an inline one on the pool."""
        if inline:
            self._pool.submit(_continue_inline, run_id)
        else:
            get_executor(False).enqueue_pass(run_id)

    def run_once(self, *, ticks_only: bool = False) -> list[WorkflowScheduleTick]:
        close_old_connections()
        try:
            return scheduler_pass(start=self.starter, wake=self.waker, ticks_only=ticks_only)
        finally:
            close_old_connections()

    def next_wait(self) -> float:
        """Seconds until the next pass: until the next schedule tick, at least
        ``MIN_WAIT`` and at most ``interval``."""
        soonest = WorkflowSchedule.objects.filter(
            paused=False, next_fire_at__isnull=False,
        ).order_by("next_fire_at").values_list("next_fire_at", flat=True).first()
        if soonest is None:
            return self.interval
        seconds = (soonest - clock().now()).total_seconds()
        return min(self.interval, max(MIN_WAIT, seconds))

    def loop(self) -> None:
        # A whole pass every ``interval`` (delayed starts, timeouts, deadlines, queues);
        # between two, as the next tick falls due, passes that write the due ticks only.
        whole_at = 0.0
        while not self._stop.is_set():
            wait = self.interval
            try:
                whole = time.monotonic() >= whole_at
                if whole:
                    whole_at = time.monotonic() + self.interval
                self.run_once(ticks_only=not whole)
                wait = min(self.next_wait(), max(0.0, whole_at - time.monotonic()))
            except Exception:  # the loop outlives a failed pass (database restart...)
                logger.exception("time keeper: the scheduler pass failed")
            self._stop.wait(wait)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.loop, name="pikku-time-keeper",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5) -> None:
        """End the loop (waiting ``timeout`` for it) and let the pool's runs finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=timeout != 0, cancel_futures=False)
