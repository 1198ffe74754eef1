"""Writes of the lifecycle, recovery and the surfaces: child runs, re-drives, retries,
cancels' closed steps and deletions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import F, Q

from ...exceptions import WorkflowRunStateError
from ...mirror import changed
from ...models import StepAttempt, WorkflowRun, WorkflowStep
from ...status import RunStatus, StepStatus
from ...types import RunId
from ..clock import clock
from .forks import adopt_kept_children
from .queries import with_live_descendants


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
    """Delete these runs with their steps, attempts and child runs (one transaction); a
    child run a fork reuses moves to that fork instead.

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
        adopt_kept_children(run_ids)
        WorkflowRun.objects.filter(pk__in=run_ids).delete()
