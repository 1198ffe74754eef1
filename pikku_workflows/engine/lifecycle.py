"""Run lifecycle rules the engine and ``operations`` share: child runs and the cancel
cascade."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from django.db import transaction

from ..conf import pikku_settings
from ..exceptions import WorkflowError, WorkflowRunStateError
from ..models import WorkflowRun, WorkflowStep
from ..registry import registry
from ..status import RunStatus
from ..types import RunId
from . import events, flow, store
from .clock import clock
from .dispatch import get_executor
from .versions import check_startable


class ChildDepthExceeded(WorkflowError):
    """A child run would nest deeper than ``MAX_CHILD_DEPTH``; nothing was written."""

    code = "CHILD_DEPTH_EXCEEDED"


def after_status_change(run: Any, status: str, *, children: bool = True) -> None:
    """End a finished run's live children; wake the parent when a child run ends.

    A run never ends with live children: when it ends (cancelled, failed or completed),
    its steps waiting for a child run are closed and its live child runs cancelled, down
    the whole tree. ``children=False``: the caller knows the run started no child run.
    """
    if status in RunStatus.terminal() and (children or status == RunStatus.CANCELLED):
        _end_descendants(run.pk, status)
    if status in RunStatus.terminal() or status == RunStatus.SUSPENDED:
        free_slot(run)
    if run.parent_run_id and status in RunStatus.terminal():
        parent = store.load_run(run.parent_run_id)
        if parent.status == RunStatus.RUNNING:
            get_executor(parent.inline).enqueue_pass(parent.pk, workflow=parent.workflow)


def free_slot(run: Any) -> None:
    """The run ended or suspended: if it held a concurrency slot, the oldest runs queued
    for its key start (DESIGN 8.4; the time keeper does it too, as a safety net)."""
    key = getattr(run, "concurrency_key", None)
    if key is None:
        return
    concurrency = flow.concurrency_of(registry.find_workflow(run.workflow))
    if concurrency is None:
        return
    flow.start_runs(flow.release(run.workflow, key, concurrency.max))


def end_children(run_id: RunId, status: str) -> None:
    """The cascade of a run that ended as ``status``, again (recovery: the process that
    ended it died before its cascade); harmless when there is nothing left to end."""
    _end_descendants(run_id, status, through_finished=True)


def _end_descendants(run_id: RunId, status: str, *, through_finished: bool = False) -> None:
    """Close the waiting steps of ``run_id`` (which ended as ``status``) and cancel its
    live child runs, and theirs; ``through_finished``: look below finished children too
    (after an interrupted cascade)."""
    # A worklist, not recursion: the cascade must work from a deep stack too (an inline
    # child that ran into RecursionError).
    todo = [(run_id, status)]
    while todo:
        ended_id, ended = todo.pop()
        why = "was cancelled" if ended == RunStatus.CANCELLED else f"ended ({ended})"
        if ended == RunStatus.CANCELLED:
            # What it waited for can no longer reach it. (A failed run keeps its open
            # waits: nothing wakes a failed run, and retry_run carries them on.)
            events.cancel_waits(ended_id)
        store.close_waiting_steps(ended_id, {
            "code": "WORKFLOW_CANCELLED", "type": "WorkflowCancelled",
            "message": f"run {ended_id} {why} while this step waited"},
            children_only=ended != RunStatus.CANCELLED)
        children = (store.child_run_statuses(ended_id) if through_finished else
                    [(child_id, RunStatus.RUNNING) for child_id in
                     store.live_child_ids(ended_id)])
        for child_id, child_status in children:
            if child_status in RunStatus.terminal():
                todo.append((child_id, child_status))
                continue
            with contextlib.suppress(WorkflowError):
                child = store.load_run(child_id)
                if _cancel(child, f"parent run {ended_id} {why} while this child run was live"):
                    todo.append((child.pk, RunStatus.CANCELLED))


def _cancel(run: WorkflowRun, reason: str | None) -> bool:
    error = {"code": "WORKFLOW_CANCELLED", "message": reason or "Workflow cancelled"}
    live = (RunStatus.SCHEDULED, RunStatus.RUNNING, RunStatus.SUSPENDED)
    return store.set_run_status(run.pk, RunStatus.CANCELLED, expected=live, error=error,
                                workflow=run.workflow)


def cancel_run(run_id: RunId, reason: str | None = None) -> WorkflowRun:
    """Cancel a scheduled, running or suspended run and, through ``after_status_change``, its live
    child runs (``operations.cancel_run``, and the cascade from a cancelled parent).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished.
    """
    run = store.load_run(run_id)
    if not _cancel(run, reason):
        raise WorkflowRunStateError(f"run {run.pk} is {run.status}: it cannot be cancelled")
    after_status_change(run, RunStatus.CANCELLED)
    return store.load_run(run.pk)


def child_depth(parent: WorkflowRun) -> int:
    """How many ancestors a child run of ``parent`` would have, counted up to one more
    than ``MAX_CHILD_DEPTH`` (one query per ancestor of ``parent``; only when a child
    run is created)."""
    limit = pikku_settings.MAX_CHILD_DEPTH
    depth, ancestor = 1, parent.parent_run_id
    while ancestor is not None and depth <= limit:
        depth += 1
        ancestor = store.parent_run_id(ancestor)
    return depth


def create_child_run(parent: WorkflowRun, step: WorkflowStep, name: str, data: Any) -> WorkflowRun:
    """Start workflow ``name`` as the child run of ``parent``'s step; returns it as it stands.

    The child inherits the parent's owner and executor; its end wakes the parent.
    """
    definition = registry.workflow(name)
    check_startable(definition)
    limit = pikku_settings.MAX_CHILD_DEPTH
    if child_depth(parent) > limit:
        raise ChildDepthExceeded(
            f"child run of workflow '{name}' would be nested {limit + 1} deep (ancestors), "
            f"deeper than MAX_CHILD_DEPTH ({limit}); a workflow that starts itself needs an "
            f"end, or raise PIKKU_WORKFLOWS['MAX_CHILD_DEPTH']")
    analysis = definition.analysis
    concurrency = flow.concurrency_of(definition)
    key = None if concurrency is None else flow.key_for(concurrency, data, name)
    timeout = flow.timeout_of(definition)
    now = clock().now()
    # The child's deadline: its own, unless its parent's comes first.
    deadlines = [d for d in (parent.deadline_at,
                             None if timeout is None else now + timedelta(seconds=timeout))
                 if d is not None]
    admission: flow.Admission | None = None
    with transaction.atomic():
        fields: dict[str, Any] = {}
        if concurrency is not None and key is not None:
            admission = flow.admit(name, key, concurrency, holder_parent=(
                parent.workflow == name and parent.concurrency_key == key))
            if admission.status != RunStatus.RUNNING:
                fields["status"] = admission.status
            if admission.status == RunStatus.SCHEDULED:
                fields.update(flow.waiting_fields(now))
            elif admission.status == RunStatus.CANCELLED:
                fields.update(error=flow.skipped_error(name, key, concurrency.max),
                              finished_at=now)
        child = store.create_run(
            workflow=name, input=data, inline=parent.inline, owner_id=parent.owner_id,
            parent_run_id=parent.pk, graph_hash=analysis.graph_hash,
            deterministic=analysis.deterministic, planned_steps=analysis.planned_steps,
            wire={"type": "workflow", "parent_run": str(parent.pk), "parent_step": step.step_name},
            concurrency_key=key, run_timeout=timeout,
            deadline_at=min(deadlines) if deadlines else None, **fields,
        )
        store.attach_child_run(step, child)
    if admission is not None:
        for cancelled in admission.cancelled:
            after_status_change(cancelled, RunStatus.CANCELLED)
        flow.start_runs(admission.promoted)
    if child.status != RunStatus.RUNNING:
        return child  # queued for a slot (its start wakes nothing) or skipped
    try:
        get_executor(child.inline).enqueue_pass(child.pk)
    except RecursionError:
        if not child.inline:
            raise
        # Nested inline passes ran out of Python stack somewhere below: fail this child
        # (its parent's step fails with it) and end whatever it left live. If even that
        # runs out of stack, the next level up does it with more room.
        _fail_child(child, "RecursionError", "inline child runs nested too deep for "
                    "Python's stack (RecursionError): lower MAX_CHILD_DEPTH or run them "
                    "on the rq executor")
    return store.load_run(child.pk)


def _fail_child(child: WorkflowRun, code: str, message: str) -> None:
    error = {"code": code, "message": message}
    store.close_waiting_steps(child.pk, {**error, "type": code})
    store.set_run_status(child.pk, RunStatus.FAILED,
                         expected=(RunStatus.RUNNING, RunStatus.SUSPENDED), error=error,
                         workflow=child.workflow)
    # Deeper runs may have ended half-way (their own cascade ran out of stack too).
    _end_descendants(child.pk, RunStatus.FAILED, through_finished=True)
