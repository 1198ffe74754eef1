"""Reads of runs and steps for passes, recovery and operations (no writes here)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db.models import Exists, OuterRef, Q, QuerySet

from ...models import WorkflowRun, WorkflowStep
from ...status import RunStatus, StepStatus
from ...types import RunId
from ..clock import clock
from .backends import in_flight
from .errors import not_found
from .runs import run_uuid


def load_steps(run_id: RunId) -> dict[str, WorkflowStep]:
    """All step rows of a run, by step name: the replay snapshot (one query)."""
    return {s.step_name: s for s in WorkflowStep.objects.filter(run__pk=run_id)}


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
            RunStatus.SCHEDULED, RunStatus.RUNNING, RunStatus.SUSPENDED)),
        run__pk=run_ref,
    ).exclude(status=StepStatus.RUNNING, child_run__isnull=True, lease_expires_at__isnull=True)


def unseen_outcomes(run_ref: OuterRef) -> QuerySet[WorkflowStep]:
    """Steps of the run that ended for good after its last pass leased it (a lease
    stamps ``updated_at``), so that no pass may have seen them: the finisher that
    should have driven the pass died after its commit. Steps a pass ran itself count
    too (the sweep may re-drive such a run once, needlessly, never more: its pass
    stamps the run again)."""
    return WorkflowStep.objects.filter(
        Q(status=StepStatus.SUCCEEDED) | Q(status=StepStatus.FAILED, wake_at__isnull=True),
        run__pk=run_ref, updated_at__gt=OuterRef("updated_at"),
    )


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
        raise not_found(run_id)
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


def live_child_ids(run_id: RunId) -> list[uuid.UUID]:
    return list(
        WorkflowRun.objects.filter(
            parent_run__pk=run_id,
            # (A scheduled child waits for a concurrency slot of its workflow.)
            status__in=(RunStatus.SCHEDULED, RunStatus.RUNNING, RunStatus.SUSPENDED),
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
