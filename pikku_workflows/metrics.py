"""Optional Prometheus metrics (``pip install 'pikku-workflows[metrics]'``).

Enable with ``PIKKU_WORKFLOWS = {"METRICS": True}`` in the settings of every process
that runs workflows (web and ``pikku_worker``): at startup the app connects the receivers
below to the engine's signals, so the engine itself never imports prometheus-client.
Serve them with the protected view::

    # urls.py
    from pikku_workflows.metrics import metrics_view
    path("metrics/", metrics_view),

The view answers staff users, and, when ``METRICS_TOKEN`` is set, requests with the
header ``Authorization: Bearer <METRICS_TOKEN>`` (a Prometheus scrape job's
``authorization`` credentials). Everyone else gets 403.

Metrics (``function`` is a step's registered function name, ``inline`` for a closure):

- ``pikku_workflow_runs_total{workflow, status}``: counter of runs reaching ``status``
  (``started``, ``completed``, ``failed``, ``suspended``, ``cancelled``).
- ``pikku_workflow_runs{workflow, status}``: gauge of the runs ``running`` or
  ``suspended`` now, read from the database at each scrape (right across processes).
- ``pikku_workflow_step_duration_seconds{function, outcome}``: histogram of attempt
  durations, ``outcome`` ``succeeded``, ``retried`` (failed, another attempt follows) or
  ``failed`` (terminally).
- ``pikku_workflow_step_retries_total{function}``: counter of failed attempts that are
  retried; ``pikku_workflow_step_failures_total{function}``: steps failed terminally.
- ``pikku_workflow_step_queue_wait_seconds{function}``: histogram of the time a queued
  step waited between its job being sent and a worker starting it (per step attempt,
  from the step's rows).
- ``pikku_workflow_schedule_to_start_seconds{kind, queue}``: histogram of the time from
  a job being enqueued (or falling due, for a delayed one) to a ``pikku_worker``
  starting it, per job: ``kind`` ``pass`` (an orchestrator pass, or the wake-ups that
  start passes) or ``step`` (a queued step, or a fan-out's steps), ``queue`` the queue it
  came from. Observed by the worker (the ``job_started`` signal).
- ``pikku_workflow_queue_depth{queue}``: gauge of the jobs waiting on each workflow
  queue, and ``pikku_workflow_queue_oldest_job_seconds{queue}`` the age of the one at
  its head; read from Redis at each scrape (only on the ``rq`` executor).

The counters and histograms live in the process that recorded the transition. With
several processes (gunicorn workers, ``pikku_worker --workers N``) use
prometheus-client's multiprocess mode: set ``PROMETHEUS_MULTIPROC_DIR`` to a shared,
empty directory in every process; the view then aggregates all of them.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden

from . import signals

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

MISSING = ("pikku_workflows.metrics needs prometheus-client: "
           "pip install 'pikku-workflows[metrics]' (or prometheus-client>=0.20)")
# Step durations run from milliseconds to minutes.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
           120, 300, 600)
DISPATCH_UID = "pikku_workflows.metrics"
logger = logging.getLogger("pikku_workflows.metrics")

# Counters and histograms by name (Any: each kind has its own methods).
_metrics: dict[str, Any] = {}


def _client() -> ModuleType:
    try:
        import prometheus_client
    except ImportError:
        raise ImproperlyConfigured(MISSING) from None
    return prometheus_client


def _create() -> dict[str, Any]:
    """The metric objects, created once per process in the default registry."""
    if not _metrics:
        client = _client()
        _metrics.update(
            runs=client.Counter("pikku_workflow_runs_total",
                                "Workflow runs that reached a status",
                                ["workflow", "status"]),
            duration=client.Histogram("pikku_workflow_step_duration_seconds",
                                      "Duration of step attempts", ["function", "outcome"],
                                      buckets=BUCKETS),
            retries=client.Counter("pikku_workflow_step_retries_total",
                                   "Failed step attempts that are retried", ["function"]),
            failures=client.Counter("pikku_workflow_step_failures_total",
                                    "Steps that failed terminally", ["function"]),
            queue_wait=client.Histogram("pikku_workflow_step_queue_wait_seconds",
                                        "Time queued steps waited for a worker",
                                        ["function"], buckets=BUCKETS),
            schedule_to_start=client.Histogram(
                "pikku_workflow_schedule_to_start_seconds",
                "Time from a job being enqueued (or due) to a worker starting it",
                ["kind", "queue"], buckets=BUCKETS),
        )
    return _metrics


# --- receivers ----------------------------------------------------------------------------


def _run_receiver(status: str) -> Callable[..., None]:
    def receiver(workflow: str | None = None, **kwargs: object) -> None:
        _metrics["runs"].labels(workflow=workflow or "", status=status).inc()

    receiver.__name__ = f"count_{status}"
    return receiver


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _step_receiver(outcome: str) -> Callable[..., None]:
    def receiver(function: str | None = None, started_at: datetime | None = None,
                 finished_at: datetime | None = None, scheduled_at: datetime | None = None,
                 **kwargs: object) -> None:
        label = function or "inline"
        duration = _seconds(started_at, finished_at)
        if duration is not None:
            _metrics["duration"].labels(function=label, outcome=outcome).observe(duration)
        wait = _seconds(scheduled_at, started_at)
        if wait is not None:
            _metrics["queue_wait"].labels(function=label).observe(wait)
        if outcome == "retried":
            _metrics["retries"].labels(function=label).inc()
        elif outcome == "failed":
            _metrics["failures"].labels(function=label).inc()

    receiver.__name__ = f"observe_{outcome}"
    return receiver


def observe_job_start(kind: str = "", queue: str = "", ready_at: datetime | None = None,
                      started_at: datetime | None = None, **kwargs: object) -> None:
    """``job_started``: a job's schedule-to-start latency."""
    latency = _seconds(ready_at, started_at)
    if latency is not None:
        _metrics["schedule_to_start"].labels(kind=kind, queue=queue).observe(latency)


_RECEIVERS = [
    (signals.job_started, observe_job_start),
    (signals.run_started, _run_receiver("started")),
    (signals.run_completed, _run_receiver("completed")),
    (signals.run_failed, _run_receiver("failed")),
    (signals.run_suspended, _run_receiver("suspended")),
    (signals.run_cancelled, _run_receiver("cancelled")),
    (signals.step_succeeded, _step_receiver("succeeded")),
    (signals.step_retried, _step_receiver("retried")),
    (signals.step_failed, _step_receiver("failed")),
]


def install() -> None:
    """Create the metrics and connect their receivers (idempotent).

    Raises:
        ImproperlyConfigured: prometheus-client is not installed.
    """
    _create()
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, weak=False, dispatch_uid=DISPATCH_UID)


def uninstall() -> None:
    """Disconnect the receivers (the metrics keep their values)."""
    for signal, _ in _RECEIVERS:
        signal.disconnect(dispatch_uid=DISPATCH_UID)


def installed() -> bool:
    """Whether the receivers are connected in this process."""
    return any(entry[0][0] == DISPATCH_UID for entry in signals.run_started.receivers)


# --- the live-runs gauge, read from the database at scrape time ---------------------------


class LiveRunsCollector:
    """``pikku_workflow_runs{workflow, status}``: running and suspended runs now."""

    def describe(self) -> list[Metric]:
        return []  # no query when the collector is registered

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count
        from prometheus_client.core import GaugeMetricFamily

        from .models import WorkflowRun
        from .status import RunStatus

        gauge = GaugeMetricFamily(
            "pikku_workflow_runs", "Workflow runs running or suspended now",
            labels=["workflow", "status"])
        live = (RunStatus.RUNNING, RunStatus.SUSPENDED)
        rows = (WorkflowRun.objects.filter(status__in=live).values("workflow", "status")
                .annotate(n=Count("pk")).order_by())
        for row in rows:
            gauge.add_metric([row["workflow"], row["status"]], row["n"])
        yield gauge


class QueueCollector:
    """``pikku_workflow_queue_depth{queue}`` and ``pikku_workflow_queue_oldest_job_seconds
    {queue}``: the jobs waiting on each workflow queue now, and the age of the oldest."""

    def describe(self) -> list[Metric]:
        return []  # no Redis read when the collector is registered

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        from .conf import pikku_settings
        from .engine.clock import clock
        from .engine.dispatch import all_queue_names
        from .executors.rq import queue_stats

        depth = GaugeMetricFamily("pikku_workflow_queue_depth",
                                  "Jobs waiting on each workflow queue", labels=["queue"])
        oldest = GaugeMetricFamily("pikku_workflow_queue_oldest_job_seconds",
                                   "Age of the job at the head of each workflow queue",
                                   labels=["queue"])
        stats = []
        if pikku_settings.EXECUTOR == "rq":
            try:
                stats = queue_stats(all_queue_names())
            except Exception:
                # The scrape still answers (the other metrics, and no queue sample).
                logger.warning("metrics: could not read the queues from Redis", exc_info=True)
        now = clock().now()
        for queue in stats:
            depth.add_metric([queue["name"]], queue["queued"])
            head = queue["oldest_enqueued_at"]
            if head is not None:
                oldest.add_metric([queue["name"]], max((now - head).total_seconds(), 0.0))
        yield depth
        yield oldest


# --- the view -----------------------------------------------------------------------------


def _allowed(request: HttpRequest) -> bool:
    from .conf import pikku_settings

    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        return True
    token = pikku_settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer "):].encode(), token.encode())
    return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of this process's (or, in multiprocess mode, every
    process's) metrics, plus the live-runs gauge. Staff or ``METRICS_TOKEN`` only.

    Raises:
        ImproperlyConfigured: prometheus-client is not installed.
    """
    client = _client()
    if not _allowed(request):
        return HttpResponseForbidden("metrics: staff or the METRICS_TOKEN bearer token only\n")
    registry = client.CollectorRegistry(auto_describe=True)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        # prometheus_client leaves this constructor unannotated.
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = client.REGISTRY
    body = client.generate_latest(registry) + client.generate_latest(_live_registry(client))
    return HttpResponse(body, content_type=client.CONTENT_TYPE_LATEST)


def _live_registry(client: ModuleType) -> CollectorRegistry:
    registry: CollectorRegistry = client.CollectorRegistry(auto_describe=False)
    registry.register(LiveRunsCollector())
    registry.register(QueueCollector())
    return registry
