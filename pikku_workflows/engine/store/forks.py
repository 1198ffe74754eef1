"""Forks: a new run that keeps a terminal run's steps before a cut and reruns the rest."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction

from ...mirror import changed
from ...models import StepAttempt, WorkflowRun, WorkflowStep
from ...types import RunId
from ..clock import clock
from .runs import create_run

#: The step fields a kept step carries over from its source row (all but its run and id).
KEPT_STEP_FIELDS = (
    "step_name", "rpc_name", "data", "status", "result", "error", "attempt_count",
    "attempt_base", "retries", "retry_delay", "branch_taken", "from_step_name",
    "child_run_id", "wake_at", "created_at", "updated_at",
)
#: The attempt fields a kept attempt carries over (all but its step and id).
KEPT_ATTEMPT_FIELDS = (
    "attempt", "status", "result", "error", "created_at", "scheduled_at", "running_at",
    "succeeded_at", "failed_at",
)
#: Rows written per INSERT or UPDATE statement.
BATCH = 500


def kept_steps(source_id: RunId, step_names: Sequence[str]) -> list[WorkflowStep]:
    """The source's steps named ``step_names``, in the order it recorded them."""
    wanted = set(step_names)
    return [step for step in WorkflowStep.objects.filter(run__pk=source_id).order_by("id")
            if step.step_name in wanted]


def create_fork(source: WorkflowRun, kept: Sequence[WorkflowStep], *,
                state: dict[str, Any], **fields: Any) -> WorkflowRun:
    """Create the fork of ``source`` (``running`` unless ``fields`` say otherwise) with
    copies of ``kept`` (its steps and their attempts, ids and timestamps of their own but
    for the times, kept as recorded), in one transaction. The source is only read.

    Args:
        source: The terminal run forked.
        kept: The source's steps the fork keeps, in the order it recorded them.
        state: The fork's state.
        **fields: The fork's other fields (``workflow``, ``input``, ``concurrency_key``,
            a status its admission decided...).

    Returns:
        The fork (not leased: its first pass takes the lease).
    """
    with transaction.atomic():
        # A fork waits in the world of its source: it may consume the events its source
        # could (its source's watermark), not only those sent after the fork.
        # A fresh deadline from the source's timeout (DESIGN 8.4); its concurrency key
        # and status are the caller's (a fork is admitted as a start).
        timeout = source.run_timeout
        flow_fields: dict[str, Any] = {
            "run_timeout": timeout,
            "deadline_at": None if timeout is None else
            clock().now() + timedelta(seconds=timeout)}
        fork = create_run(state=state, forked_from=source,
                          event_watermark=source.event_watermark,
                          **{**flow_fields, **fields})
        if kept:
            copies = [WorkflowStep(run_id=fork.pk, **{name: getattr(step, name)
                                                      for name in KEPT_STEP_FIELDS})
                      for step in kept]
            WorkflowStep.objects.bulk_create(copies, batch_size=BATCH)
            # bulk_create stamps auto_now(_add) fields with the time of the copy: the
            # kept steps keep the times they ran at.
            for copy, step in zip(copies, kept, strict=True):
                copy.created_at, copy.updated_at = step.created_at, step.updated_at
            WorkflowStep.objects.bulk_update(copies, ["created_at", "updated_at"],
                                             batch_size=BATCH)
            new_ids = {step.pk: copy.pk for step, copy in zip(kept, copies, strict=True)}
            attempts = [
                StepAttempt(step_id=new_ids[attempt.step_id],
                            **{name: getattr(attempt, name) for name in KEPT_ATTEMPT_FIELDS})
                for attempt in StepAttempt.objects.filter(
                    step_id__in=list(new_ids)).order_by("step_id", "attempt").iterator()]
            StepAttempt.objects.bulk_create(attempts, batch_size=BATCH)
            fork.fork_kept_through = max(copy.pk for copy in copies)
            WorkflowRun.objects.filter(pk=fork.pk).update(
                fork_kept_through=fork.fork_kept_through)
        changed("run", fork.pk)
    return fork


def adopt_kept_children(run_ids: Sequence[RunId]) -> None:
    """Before ``run_ids`` are deleted: their child runs that a fork's kept step reuses
    move to that fork (they would go with their parent, leaving the fork's step without
    the run it recorded). Call inside the deletion's transaction."""
    reused = (WorkflowStep.objects.filter(child_run__parent_run__pk__in=list(run_ids))
              .exclude(run__pk__in=list(run_ids))
              .values_list("child_run_id", "run_id").order_by("id"))
    moved: dict[Any, Any] = {}
    for child_id, fork_id in reused:
        moved.setdefault(child_id, fork_id)  # the oldest fork that reuses it
    for child_id, fork_id in moved.items():
        WorkflowRun.objects.filter(pk=child_id).update(parent_run_id=fork_id)
        changed("run", child_id)
