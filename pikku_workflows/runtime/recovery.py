"""Recovery: re-drive runs from their rows when nothing else will (the database is the truth).

One sweep looks for (a) work that never got a job (runs with no pass yet, pending or
long-scheduled steps), (b) running runs with nothing in flight (or only children, beside
a step that ended unseen) and no progress, (c) sleeps, delayed retries and approval
deadlines that are due, (d) leases of dead processes, and (e) finished runs whose
children were left live. Each run gets at most one new pass per sweep.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from ..conf import pikku_settings
from ..engine import events, lifecycle, store
from ..engine.clock import clock
from ..engine.dispatch import get_executor, step_dispatcher, transport_configured
from ..engine.steps import next_attempt_at
from ..log_ids import log_extra
from ..models import WorkflowRun, WorkflowStep
from ..registry import registry
from ..status import RunStatus, StepStatus
from ..types import RunId
from .orchestrator import run_pass

logger = logging.getLogger("pikku_workflows.recovery")

# A due wake-up is left to RQ's scheduler for this long before the sweep steps in.
WAKE_GRACE = timedelta(seconds=2)
_LIVE_RUN = Q(run__status=RunStatus.RUNNING)
#: The most waiting runs one sweep wakes for each reason (the next sweep takes the rest).
RECOVERY_BATCH = 500


def wake_expired_gates(now: Any = None) -> list[Any]:
    """Give a pass to suspended runs whose approval deadline has passed.

    Returns:
        The ids of the runs woken.
    """
    now = now or clock().now()
    due = (
        WorkflowStep.objects.filter(
            status=StepStatus.SUSPENDED, wake_at__lte=now, run__status=RunStatus.SUSPENDED
        )
        .values_list("run_id", "run__inline")
        .distinct()
    )
    woken = []
    for run_id, inline in due:
        if store.set_run_status(run_id, RunStatus.RUNNING, expected=(RunStatus.SUSPENDED,)):
            get_executor(inline).enqueue_pass(run_id)
            woken.append(run_id)
    return woken


@dataclass
class _Sweep:
    """What one sweep has found so far: counts by kind and the runs to re-drive."""

    now: Any
    backlog_since: Any
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("undispatched", "stalled", "due", "dead_leases", "orphans"), 0))
    passes: set[Any] = field(default_factory=set)

    def waiting(self, at: Any) -> bool:
        """Whether work whose job was enqueued about ``at`` (within the grace) is still
        behind the head of a queue's backlog."""
        return self.backlog_since is not None and at is not None and \
            self.backlog_since <= at + WAKE_GRACE

    def found(self, kind: str, run_id: Any = None) -> None:
        self.counts[kind] += 1
        if run_id is not None:
            self.passes.add(run_id)


@dataclass
class Sweeper:
    """Runs sweeps; remembers, per process, when each run may be re-driven again."""

    backoff: dict[Any, tuple[float, float]] = field(default_factory=dict)

    def sweep(self) -> dict[str, int]:
        """One pass over all five kinds of stuck work; returns counts by kind.

        Work whose job may still be waiting in a queue behind a backlog (a queue's oldest
        waiting job is older than the work) is left alone: re-driving it would only
        double the backlog. Once the queues have moved past it, its job was lost.
        """
        found = _Sweep(now=clock().now(), backlog_since=oldest_waiting_job())
        self._dead_leases(found)
        self._undispatched(found)
        self._orphans(found)
        self._due(found)
        self._stalled(found)
        self._drive(found)
        if any(found.counts.values()):
            logger.info("recovery sweep: %s", found.counts)
        return found.counts

    def _dead_leases(self, found: _Sweep) -> None:
        """(d) Leases of dead processes: a step worker's attempt fails; a run's pass is
        re-driven."""
        for step in WorkflowStep.objects.filter(
            _LIVE_RUN, status=StepStatus.RUNNING, lease_expires_at__lt=found.now
        ):
            if self._lost_step(step):
                found.found("dead_leases", step.run_id)
        # Once re-driven (which stamps updated_at), its pass may wait in a backlog: not
        # re-driven again meanwhile.
        for run_id, updated_at in WorkflowRun.objects.filter(
            status=RunStatus.RUNNING, lease_expires_at__lt=found.now
        ).values_list("pk", "updated_at"):
            if not found.waiting(updated_at):
                found.found("dead_leases", run_id)

    def _undispatched(self, found: _Sweep) -> None:
        """(a) Work that never got a job or whose job was lost: runs never passed, queued
        steps, and parents of a child that ended unseen."""
        older = found.now - timedelta(seconds=pikku_settings.UNDISPATCHED_AFTER)
        no_steps = ~Exists(WorkflowStep.objects.filter(run_id=OuterRef("pk")))
        for run_id, created_at in WorkflowRun.objects.filter(
            no_steps, status=RunStatus.RUNNING, created_at__lt=older, lease_owner=""
        ).values_list("pk", "created_at"):
            if not found.waiting(created_at):
                found.found("undispatched", run_id)
        for step in WorkflowStep.objects.filter(
            _LIVE_RUN, updated_at__lt=older, run__lease_owner="",
            status__in=(StepStatus.PENDING, StepStatus.SCHEDULED),
        ).filter(Q(wake_at__isnull=True) | Q(wake_at__lt=found.now - WAKE_GRACE)).exclude(
            status=StepStatus.SCHEDULED, rpc_name__isnull=True  # sleeps: see _due
        ):
            if found.waiting(step.updated_at):
                continue
            if step.status == StepStatus.PENDING or _runs_in_pass(step):
                found.found("undispatched", step.run_id)  # the pass runs or dispatches it
            else:
                found.found("undispatched")
                self._redispatch(step)
        for run_id, finished_at in WorkflowStep.objects.filter(
            _LIVE_RUN, run__lease_owner="", status=StepStatus.RUNNING,
            child_run__status__in=RunStatus.terminal(),
        ).values_list("run_id", "child_run__finished_at"):
            if not found.waiting(finished_at):  # the parent's pass queued as the child ended
                found.found("undispatched", run_id)

    def _orphans(self, found: _Sweep) -> None:
        """(e) A run that ended while a child lived, or with a step still waiting for a
        child: the process that ended it died before its cascade (a SIGKILL)."""
        finished = RunStatus.terminal()
        ended = set(WorkflowRun.objects.filter(
            status__in=finished, child_runs__status__in=(RunStatus.RUNNING, RunStatus.SUSPENDED),
        ).values_list("pk", "status"))
        ended.update(WorkflowStep.objects.filter(
            run__status__in=finished, child_run__isnull=False,
            status__in=(StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.RUNNING),
        ).values_list("run_id", "run__status"))
        for run_id, status in ended:
            lifecycle.end_children(run_id, status)
            found.found("orphans")

    def _due(self, found: _Sweep) -> None:
        """(c) Sleeps and in-pass retry delays that are due; approval deadlines; waits for
        an event or message that came or timed out."""
        for step in WorkflowStep.objects.filter(
            _LIVE_RUN, wake_at__lt=found.now - WAKE_GRACE,
        ).filter(
            Q(status=StepStatus.SCHEDULED, rpc_name__isnull=True) | Q(status=StepStatus.FAILED)
        ):
            if not found.waiting(step.wake_at):
                found.found("due", step.run_id)
        found.counts["due"] += len(wake_expired_gates(clock().now()))
        # Waits whose event or message is stored (its wake-up was lost) or whose
        # timeout passed (the time keeper ends those too; either may be first).
        found.counts["due"] += events.wake_runs(events.runs_with_news(RECOVERY_BATCH))
        found.counts["due"] += events.wake_runs(events.due_timeouts(found.now,
                                                                   RECOVERY_BATCH))

    def _stalled(self, found: _Sweep) -> None:
        """(b) Running, not leased, nothing in flight, no progress for STALLED_AFTER.

        A step running under no lease of its own, no run lease and no child was begun by
        a pass that died: it is not in flight. A live child hides nothing: a step that
        ended beside it after the last pass (its finisher died before driving the pass)
        is news the child may never bring.
        """
        awaited = store.awaited_steps(OuterRef("pk"))
        news = ~Exists(awaited.filter(child_run__isnull=True)) & Exists(
            store.unseen_outcomes(OuterRef("pk")))
        # Behind a backlog, a run not passed since it was queued is waiting, not stalled:
        # re-driving every such run at each sweep would multiply the backlog.
        for run_id, updated_at in WorkflowRun.objects.filter(
            ~Exists(awaited) | news, status=RunStatus.RUNNING, lease_owner="",
            updated_at__lt=found.now - timedelta(seconds=pikku_settings.STALLED_AFTER),
        ).values_list("pk", "updated_at"):
            if not found.waiting(updated_at):
                found.found("stalled", run_id)

    def _drive(self, found: _Sweep) -> None:
        """One pass for each run found. A run re-driven by an earlier sweep (``_pass``
        stamps updated_at) whose pass still waits behind the backlog is left alone,
        whatever found it this time: otherwise every sweep of every worker adds a pass
        per run, and the backlog feeds itself."""
        stamped = dict(WorkflowRun.objects.filter(pk__in=found.passes).values_list(
            "pk", "updated_at"))
        for run_id in found.passes:
            if not found.waiting(stamped.get(run_id)):
                self._pass(run_id)

    def _may_drive(self, key: Any) -> bool:
        """Exponential backoff per run across sweeps of this process."""
        not_before, delay = self.backoff.get(key, (0.0, 1.0))
        if time.monotonic() < not_before:
            return False
        cap = max(pikku_settings.STALLED_AFTER, 1.0)
        self.backoff[key] = (time.monotonic() + delay, min(delay * 2, cap))
        return True

    def _pass(self, run_id: RunId) -> None:
        if not self._may_drive(run_id):
            return
        store.touch_run(run_id)
        if transport_configured():
            get_executor(False).enqueue_pass(run_id)
        else:
            # An inline-only project: one pass here, never waiting (a later sweep wakes
            # a sleep when it is due).
            run_pass(run_id)

    def _redispatch(self, step: WorkflowStep) -> None:
        if not self._may_drive(("step", step.pk)):
            return
        store.touch_step(step.pk)
        step_dispatcher(False).dispatch_step(step.run_id, step.step_name, step.rpc_name or "")

    def _lost_step(self, step: WorkflowStep) -> bool:
        """Fail the lost attempt (guarded: only if still running with an expired lease)."""
        error = {"message": "the worker running this attempt was lost", "type": "WorkerLost"}
        try:
            with transaction.atomic():
                # Guarded: only while still running with an expired lease.
                if not WorkflowStep.objects.filter(
                    pk=step.pk, status=StepStatus.RUNNING, lease_expires_at__lt=clock().now()
                ).exists():
                    return False
                # A lost attempt is a failed one: its retry waits the step's retry_delay.
                again, wake_at = next_attempt_at(step, error)
                store.record_failure(step, store.last_attempt(step), error, wake_at=wake_at,
                                     guard=True, retrying=again)
        except store.StaleAttemptError:
            return False
        logger.warning("step %s of run %s: worker lost, attempt %s failed",
                       step.step_name, step.run_id, step.attempt_count,
                       extra=log_extra(step.run_id, step=step.step_name,
                                       attempt=step.attempt_count))
        return True


def _runs_in_pass(step: WorkflowStep) -> bool:
    """A step waiting for a named limit whose function is not queued: its pass retries
    it (a step job would find nothing to run)."""
    if not store.waiting_for(step):
        return False
    definition = registry.function(step.rpc_name or "")
    return definition is None or not definition.queued


def oldest_waiting_job() -> Any:
    """When the oldest job still waiting in a workflow queue was enqueued (None: the
    queues are empty, or there are none: an inline project)."""
    if not transport_configured():
        return None
    return get_executor(False).oldest_waiting_job()


def sweep() -> dict[str, int]:
    """One recovery sweep without memory across calls (``pikku_recover``)."""
    return Sweeper().sweep()
