"""The dashboard's figures: runs per time bucket, durations per workflow, failing steps and
schedule-to-start latency, each from one aggregate query over an indexed time window."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.db import connection
from django.db.models import (
    Aggregate,
    Case,
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Max,
    Min,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import Window
from django.db.models.functions import Coalesce, Greatest, RowNumber, Trunc
from django.utils import timezone

from ..conf import pikku_settings
from ..engine.clock import clock
from ..engine.dispatch import orchestrator_queue_name
from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..registry import registry
from ..status import RunStatus
from ..step_keys import public_step_name

#: SQLite has no percentile function: its percentiles are those of the latest
#: ``SQLITE_SAMPLE`` durations per workflow (or queue) in the window.
SQLITE_SAMPLE = 1000
#: The most failing steps listed, most failures first.
TOP_FAILING = 10
#: The run statuses whose durations and steps the dashboard measures: finished ones.
MEASURED = (RunStatus.COMPLETED, RunStatus.FAILED)


@dataclass(frozen=True)
class Span:
    """A window the dashboard shows: its length and the size of one bucket of its chart."""

    key: str
    label: str
    buckets: int
    unit: str  # "minute" or "hour": the Trunc kind
    step: timedelta


SPANS = {
    "1h": Span("1h", "Last hour, per minute", 60, "minute", timedelta(minutes=1)),
    "24h": Span("24h", "Last 24 hours, per hour", 24, "hour", timedelta(hours=1)),
}
DEFAULT_SPAN = "24h"


@dataclass
class Bucket:
    """One bucket of the chart: its start (in the user's time zone) and its counts."""

    start: datetime
    created: int = 0
    completed: int = 0
    failed: int = 0


@dataclass
class TimeWindow:
    """The dashboard's window: from the start of its first bucket to now."""

    span: Span
    start: datetime
    now: datetime
    zone: tzinfo
    buckets: list[Bucket] = field(default_factory=list)


@dataclass
class Durations:
    """p50 and p95 of one group (a workflow or a queue), in seconds, over ``count``
    values (of ``total`` in the window: fewer when SQLite's sample bounded them)."""

    name: str
    count: int
    total: int
    p50: float | None
    p95: float | None


def sampled() -> bool:
    """Whether percentiles come from a bounded sample (databases without
    ``percentile_cont``: SQLite) rather than from every value in the window."""
    return connection.vendor != "postgresql"


def _truncate(moment: datetime, unit: str, zone: tzinfo) -> datetime:
    local = timezone.localtime(moment, zone)
    local = local.replace(second=0, microsecond=0)
    return local.replace(minute=0) if unit == "hour" else local


def _key(moment: datetime, zone: tzinfo) -> datetime:
    """A bucket's key: its wall-clock start in the zone (the database truncates to it)."""
    return timezone.localtime(moment, zone).replace(tzinfo=None)


def window(span: Span, now: datetime | None = None, zone: tzinfo | None = None) -> TimeWindow:
    """The window of ``span`` ending now (the engine's clock): whole buckets of the
    user's time zone, the last one the current, partial one.

    Args:
        span: The span (``SPANS``).
        now: The end of the window; default, the engine's clock.
        zone: The time zone of the buckets; default, the current one (the user's).

    Returns:
        The window and its empty buckets, oldest first.
    """
    now = now or clock().now()
    zone = zone or timezone.get_current_timezone()
    last = _truncate(now, span.unit, zone).astimezone(UTC)
    # Steps of absolute time: a day of a daylight-saving change still has one bucket per
    # hour that passed, each labelled with the wall clock's time.
    starts = [last - span.step * i for i in range(span.buckets - 1, -1, -1)]
    buckets = [Bucket(start=timezone.localtime(s, zone)) for s in starts]
    return TimeWindow(span=span, start=starts[0], now=now, zone=zone, buckets=buckets)


def count_runs(win: TimeWindow) -> None:
    """Fill the buckets: runs created (a delayed start counts when it was created, not
    when it starts), and runs completed or failed, per bucket (two grouped queries: the
    ``created_at`` index and the finished runs' index)."""
    by_key = {_key(b.start, win.zone): b for b in win.buckets}
    created = (WorkflowRun.objects.filter(created_at__gte=win.start)
               .annotate(bucket=Trunc("created_at", win.span.unit, tzinfo=win.zone))
               .values("bucket").annotate(n=Count("*")).order_by())
    for row in created:
        if (bucket := by_key.get(_key(row["bucket"], win.zone))) is not None:
            bucket.created += row["n"]
    finished = (WorkflowRun.objects.filter(finished_at__gte=win.start, status__in=MEASURED)
                .annotate(bucket=Trunc("finished_at", win.span.unit, tzinfo=win.zone))
                .values("bucket", "status").annotate(n=Count("*")).order_by())
    for row in finished:
        if (bucket := by_key.get(_key(row["bucket"], win.zone))) is not None:
            if row["status"] == RunStatus.COMPLETED:
                bucket.completed += row["n"]
            else:
                bucket.failed += row["n"]


class _Percentile(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float) -> None:
        super().__init__(expression, fraction=float(fraction))


class _Seconds(Func):
    """An interval in seconds, as a double (PostgreSQL)."""

    template = "EXTRACT(EPOCH FROM (%(expressions)s))::double precision"
    output_field = FloatField()


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """``percentile_cont``'s answer for sorted ``values``: linear between the two
    closest ranks.

    Args:
        values: The values, sorted.
        fraction: 0.5 for the median, 0.95 for p95.

    Returns:
        The percentile, or None when there are no values.
    """
    if not values:
        return None
    position = fraction * (len(values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


def _interval(end: Any, start: Any) -> Any:
    return ExpressionWrapper(end - start, output_field=DurationField())


def _durations(rows: QuerySet[Any], group: str, start: Any, end: Any,
               order: Iterable[Any]) -> list[Durations]:
    """p50/p95 of ``end - start`` per ``group``: PostgreSQL's percentile_cont over every
    row; elsewhere over the latest ``SQLITE_SAMPLE`` rows of each group (``order``)."""
    totals = {row["g"]: row["n"] for row in rows.values(g=F(group)).annotate(
        n=Count("*")).order_by()}
    if not totals:
        return []
    if not sampled():
        seconds = _Seconds(_interval(end, start))
        found = rows.values(g=F(group)).annotate(
            p50=_Percentile(seconds, 0.5), p95=_Percentile(seconds, 0.95)).order_by()
        return sorted((Durations(row["g"], totals[row["g"]], totals[row["g"]], row["p50"],
                                 row["p95"]) for row in found), key=lambda d: d.name)
    ranked = rows.annotate(
        g=F(group), s=ExpressionWrapper(start, output_field=DateTimeField()),
        e=ExpressionWrapper(end, output_field=DateTimeField()),
        rank=Window(RowNumber(), partition_by=[F(group)], order_by=list(order)),
    ).filter(rank__lte=SQLITE_SAMPLE).values_list("g", "s", "e")
    values: dict[str, list[float]] = {}
    for name, began, ended in ranked:
        values.setdefault(name, []).append((ended - began).total_seconds())
    return _from_samples(values, totals)


def _from_samples(values: dict[str, list[float]], totals: dict[str, int]) -> list[Durations]:
    """Per group, p50/p95 of its sampled seconds (``totals``: its rows, sampled or not)."""
    samples = {name: sorted(seconds) for name, seconds in values.items()}
    return [Durations(name, len(sample), totals.get(name, len(sample)),
                      percentile(sample, 0.5), percentile(sample, 0.95))
            for name, sample in sorted(samples.items())]


def _finished_runs(win: TimeWindow) -> QuerySet[WorkflowRun]:
    return WorkflowRun.objects.filter(finished_at__gte=win.start, status__in=MEASURED)


def run_durations(win: TimeWindow) -> list[Durations]:
    """Per workflow, p50/p95 of the runs that completed or failed in the window, from
    creation to finish (the runs list's duration)."""
    return _durations(_finished_runs(win), "workflow", F("created_at"), F("finished_at"),
                      [F("finished_at").desc()])


def _attempts(win: TimeWindow) -> QuerySet[StepAttempt]:
    """The ended attempts of the runs that completed or failed in the window (reached
    from those runs' index, through the steps' and attempts' own keys)."""
    return StepAttempt.objects.filter(
        Q(succeeded_at__isnull=False) | Q(failed_at__isnull=False),
        step__run__finished_at__gte=win.start, step__run__status__in=MEASURED)


def step_durations(win: TimeWindow) -> list[Durations]:
    """Per workflow, p50/p95 of its step attempts' durations (running to end, as the run
    page shows an attempt) in the runs that completed or failed in the window."""
    return _durations(_attempts(win), "step__run__workflow",
                      Coalesce("running_at", "created_at"),
                      Coalesce("succeeded_at", "failed_at"),
                      [F("step__run__finished_at").desc(), F("id").desc()])


def step_queues() -> Case | Value:
    """Each attempt's step queue, from its function's ``queue`` in the registry (the
    code deployed now), else ``STEP_WORKER_QUEUE``."""
    default = pikku_settings.STEP_WORKER_QUEUE
    queues: dict[str, list[str]] = {}
    for definition in registry.functions():
        if definition.queue and definition.queue != default:
            queues.setdefault(definition.queue, []).append(definition.name)
    if not queues:
        return Value(default)
    return Case(*[When(step__rpc_name__in=names, then=Value(queue))
                  for queue, names in sorted(queues.items())], default=Value(default))


def queue_latency(win: TimeWindow) -> list[Durations]:
    """Per step queue, p50/p95 of the schedule-to-start latency of queued steps (the job
    sent to a worker starting the attempt: ``scheduled_at`` to ``running_at``) in the
    runs that completed or failed in the window. The queue is the one each function
    declares now (``step_queues``): the queue a job went to is not recorded."""
    rows = _attempts(win).filter(scheduled_at__isnull=False, running_at__isnull=False) \
        .annotate(queue=step_queues())
    return _durations(rows, "queue", F("scheduled_at"), F("running_at"),
                      [F("step__run__finished_at").desc(), F("id").desc()])


def first_steps(win: TimeWindow) -> QuerySet[Any]:
    """One row per run that completed or failed in the window and wrote a step: its
    workflow (``g``), its finish (``fin``), when it was due to start (``due``: its
    creation, or its ``start_at`` if later) and its first step row's creation
    (``first_step``). Reruns from a step are left out: their kept steps are older than
    them. The runs come from the finished runs' index, their steps by the steps' run
    key, each read once (the steps joined and grouped by run)."""
    return (WorkflowStep.objects
            .filter(run__finished_at__gte=win.start, run__status__in=MEASURED,
                    run__fork_step="")
            .values("run_id")
            .annotate(g=F("run__workflow"), fin=F("run__finished_at"),
                      due=Greatest("run__created_at",
                                   Coalesce("run__start_at", "run__created_at")),
                      first_step=Min("created_at"))
            .order_by())


def pass_latency(win: TimeWindow) -> list[Durations]:
    """Per workflow, p50/p95 of a new run's schedule-to-start latency: from the run's
    creation (or its ``start_at``, for a delayed start) to its first step row, which its
    first pass writes on reaching its first step; in the runs that completed or failed in
    the window (``first_steps``).

    Passes record no start time of their own: the first step row is the first write of
    the first pass the database keeps, so the figure is an upper bound (it includes the
    body's time before its first step, and a run's wait for its workflow's concurrency
    slot). Runs with no step are not counted. One query over ``first_steps``: PostgreSQL's
    percentile_cont; elsewhere the latest ``SQLITE_SAMPLE`` runs of each workflow.
    """
    # A percentile of a per-run minimum: the ORM cannot aggregate over an aggregate with
    # a grouping, so the grouped runs are Django's own SQL (its values still parameters)
    # wrapped in one outer query.
    inner, params = first_steps(win).query.sql_with_params()
    kept = f"FROM ({inner}) t WHERE t.first_step >= t.due"
    with connection.cursor() as cursor:
        if not sampled():
            cursor.execute(
                "SELECT g, COUNT(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY s), "  # noqa: S608
                "percentile_cont(0.95) WITHIN GROUP (ORDER BY s) FROM (SELECT t.g, "
                "EXTRACT(EPOCH FROM (t.first_step - t.due))::double precision AS s "
                f"{kept}) u GROUP BY g", params)
            return sorted((Durations(g, n, n, p50, p95) for g, n, p50, p95 in cursor),
                          key=lambda d: d.name)
        # SQLite stores times as ISO text: julianday() reads them (to the millisecond).
        cursor.execute(
            "SELECT g, s, n FROM (SELECT t.g, "  # noqa: S608
            "(julianday(t.first_step) - julianday(t.due)) * 86400.0 AS s, "
            "ROW_NUMBER() OVER (PARTITION BY t.g ORDER BY t.fin DESC) AS r, "
            f"COUNT(*) OVER (PARTITION BY t.g) AS n {kept}) u WHERE r <= %s",
            (*params, SQLITE_SAMPLE))
        values: dict[str, list[float]] = {}
        totals: dict[str, int] = {}
        for g, seconds, n in cursor:
            values.setdefault(g, []).append(round(seconds, 3))
            totals[g] = n
    return _from_samples(values, totals)


def failing_steps(win: TimeWindow) -> list[dict[str, Any]]:
    """The steps with the most failed attempts in the window (the failed attempts'
    index): workflow, step, function, failures, the last failure and its error."""
    groups = ("step__run__workflow", "step__step_name", "step__rpc_name")
    rows = list(StepAttempt.objects.filter(failed_at__gte=win.start).values(*groups)
                .annotate(failures=Count("*"), last=Max("failed_at"))
                .order_by("-failures", "-last")[:TOP_FAILING])
    if not rows:
        return []
    errors: dict[tuple[Any, ...], Any] = {}
    for attempt in StepAttempt.objects.filter(failed_at__in={row["last"] for row in rows}) \
            .values(*groups, "failed_at", "error").order_by("-id"):
        errors.setdefault((*(attempt[g] for g in groups), attempt["failed_at"]),
                          attempt["error"])
    result = []
    for row in rows:
        error = errors.get((*(row[g] for g in groups), row["last"]))
        error = error if isinstance(error, dict) else {}
        result.append({
            "workflow": row["step__run__workflow"],
            "step": public_step_name(row["step__step_name"]),
            "function": row["step__rpc_name"] or "",
            "failures": row["failures"], "last": row["last"],
            "error": str(error.get("message", "")), "code": str(error.get("code", "")),
        })
    return result


def dashboard(span: Span, now: datetime | None = None) -> dict[str, Any]:
    """Everything the page shows for ``span``.

    Args:
        span: The window's span.
        now: The window's end (default: the engine's clock).

    Returns:
        ``window`` (with its counted buckets), ``runs`` and ``steps`` (durations per
        workflow), ``latency`` (queued steps', per queue), ``pass_latency`` (first
        passes', per workflow, with ``queues``: each workflow's orchestrator queue as
        configured now), ``failing`` and ``sampled``.
    """
    win = window(span, now)
    count_runs(win)
    passes = pass_latency(win)
    return {"window": win, "runs": run_durations(win), "steps": step_durations(win),
            "latency": queue_latency(win), "pass_latency": passes,
            "queues": {row.name: orchestrator_queue_name(row.name) for row in passes},
            "failing": failing_steps(win),
            "sampled": sampled(), "sample": SQLITE_SAMPLE}
