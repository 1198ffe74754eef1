"""The Python API to start, inspect and steer workflow runs."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from .conf import pikku_settings
from .engine import store
from .engine.clock import clock
from .engine.serialization import NotSerializableError, encode
from .engine.summary import run_detail
from .exceptions import (
    WorkflowInputError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
    WorkflowRunStateError,
    WorkflowRunSuspendedError,
)
from .executors import get_executor
from .models import WorkflowRun, WorkflowStep
from .registry import WorkflowDefinition, registry
from .status import RunStatus, StepStatus


def _owner_id(owner: Any) -> Any:
    if owner is None or getattr(owner, "is_anonymous", False):
        return None
    return getattr(owner, "pk", owner)


def _validated_input(definition: WorkflowDefinition, data: Any) -> Any:
    try:
        text = encode(data, what=f"the input of workflow '{definition.name}'")
    except NotSerializableError as exc:
        raise WorkflowInputError(str(exc)) from None
    limit = pikku_settings.MAX_INPUT_BYTES
    if len(text.encode()) > limit:
        raise WorkflowInputError(
            f"the input of workflow '{definition.name}' is {len(text.encode())} bytes; "
            f"the limit (MAX_INPUT_BYTES) is {limit}"
        )
    if definition.input_serializer is not None:
        serializer = definition.input_serializer(data=data)
        if not serializer.is_valid():
            raise WorkflowInputError(
                f"invalid input for workflow '{definition.name}'", errors=serializer.errors
            )
        data = serializer.validated_data
        text = encode(data, what=f"the validated input of workflow '{definition.name}'")
    return json.loads(text)


def start_workflow(
    name: str,
    input: Any = None,
    *,
    inline: bool | None = None,
    start_node: str | None = None,
    owner: Any = None,
    idempotency_key: str | None = None,
    wire: dict | None = None,
) -> WorkflowRun:
    """Create a run of workflow ``name`` and start it.

    Args:
        name: A registered workflow name.
        input: The run input (JSON-serializable, at most ``MAX_INPUT_BYTES``).
        inline: Run in this process; ``None`` follows the ``EXECUTOR`` setting.
        start_node: For graph workflows: the declared entry node to start at.
        owner: The user (or user id) who owns the run.
        idempotency_key: Starting again with the same key returns the existing run.
        wire: How the run was started (``{"type": "http"}``...), kept on the run.

    Returns:
        The ``WorkflowRun``; an inline run has already run as far as it can.

    Raises:
        WorkflowNotFoundError: No workflow is registered as ``name``.
        WorkflowInputError: The input is invalid, not JSON-serializable or too large.
    """
    definition = registry.workflow(name)
    if start_node is not None:
        raise WorkflowInputError(f"workflow '{name}' is not a graph workflow: it has no nodes")
    data = _validated_input(definition, input)
    if inline is None:
        inline = pikku_settings.EXECUTOR == "inline"
    executor = get_executor(inline)
    analysis = definition.analysis
    fields = dict(
        workflow=name, input=data, inline=inline, owner_id=_owner_id(owner),
        graph_hash=analysis.graph_hash, deterministic=analysis.deterministic,
        planned_steps=analysis.planned_steps, wire=wire or {"type": "python"},
        idempotency_key=idempotency_key,
    )
    if idempotency_key is not None:
        existing = WorkflowRun.objects.filter(
            workflow=name, idempotency_key=idempotency_key
        ).first()
        if existing is not None:
            return existing
        try:
            with transaction.atomic():
                run = store.create_run(**fields)
        except IntegrityError:
            # A concurrent start with the same key won the unique constraint.
            return WorkflowRun.objects.get(workflow=name, idempotency_key=idempotency_key)
    else:
        run = store.create_run(**fields)
    executor.enqueue_pass(run.pk)
    run.refresh_from_db()
    return run


def run_to_completion(
    name: str, input: Any = None, *, owner: Any = None, timeout: float | None = None
) -> Any:
    """Run workflow ``name`` inline and return its output.

    Raises:
        WorkflowRunFailedError: The run failed.
        WorkflowRunCancelledError: The run was cancelled.
        WorkflowRunSuspendedError: The run suspended (it waits for a resume or approval).
        TimeoutError: ``timeout`` seconds passed while the run waited.
    """
    definition = registry.workflow(name)
    data = _validated_input(definition, input)
    analysis = definition.analysis
    run = store.create_run(
        workflow=name, input=data, inline=True, owner_id=_owner_id(owner),
        graph_hash=analysis.graph_hash, deterministic=analysis.deterministic,
        planned_steps=analysis.planned_steps, wire={"type": "internal"},
    )
    deadline = clock().after(timeout) if timeout is not None else None
    get_executor(True).enqueue_pass(run.pk, deadline=deadline)
    return _outcome(store.load_run(run.pk))


def _outcome(run: WorkflowRun) -> Any:
    error = run.error or {}
    if run.status == RunStatus.COMPLETED:
        return run.output
    if run.status == RunStatus.FAILED:
        raise WorkflowRunFailedError(error.get("message", "workflow failed"),
                                     run_id=run.pk, error=error)
    if run.status == RunStatus.CANCELLED:
        raise WorkflowRunCancelledError(error.get("message", "workflow cancelled"), run_id=run.pk)
    if run.status == RunStatus.SUSPENDED:
        raise WorkflowRunSuspendedError(
            f"run {run.pk} is suspended: {error.get('message', '')}", run_id=run.pk
        )
    raise TimeoutError(f"run {run.pk} is still {run.status}")


def get_run_status(run_id: Any) -> dict[str, Any]:
    """The run detail dict (the same shape as the REST run detail).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
    """
    return run_detail(store.load_run(run_id))


def _continue(run: WorkflowRun) -> None:
    get_executor(run.inline).enqueue_pass(run.pk)


def resume_run(run_id: Any, data: Any = None) -> WorkflowRun:
    """Resume a suspended run; it is ``running`` again before this returns control.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run is not suspended.
    """
    run = store.load_run(run_id)
    if not store.set_run_status(run.pk, RunStatus.RUNNING, expected=(RunStatus.SUSPENDED,)):
        raise WorkflowRunStateError(
            f"run {run.pk} is {run.status}, not suspended: there is nothing to resume"
        )
    _continue(run)
    return store.load_run(run.pk)


def cancel_run(run_id: Any, reason: str | None = None) -> WorkflowRun:
    """Cancel a running or suspended run and its child runs; nothing more runs for them.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished.
    """
    run = store.load_run(run_id)
    error = {"code": "WORKFLOW_CANCELLED", "message": reason or "Workflow cancelled"}
    live = (RunStatus.RUNNING, RunStatus.SUSPENDED)
    if not store.set_run_status(run.pk, RunStatus.CANCELLED, expected=live, error=error):
        raise WorkflowRunStateError(f"run {run.pk} is {run.status}: it cannot be cancelled")
    for child_id in WorkflowRun.objects.filter(parent_run=run, status__in=live).values_list(
        "pk", flat=True
    ):
        with contextlib.suppress(WorkflowRunStateError):  # it finished in the meantime
            cancel_run(child_id, reason=f"parent run {run.pk} was cancelled")
    return store.load_run(run.pk)


def retry_run(run_id: Any) -> WorkflowRun:
    """Retry a failed run: its failed steps get a fresh budget and the run carries on.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run is not failed.
    """
    run = store.load_run(run_id)
    with transaction.atomic():
        if not store.set_run_status(run.pk, RunStatus.RUNNING, expected=(RunStatus.FAILED,)):
            raise WorkflowRunStateError(f"run {run.pk} is {run.status}, not failed")
        WorkflowRun.objects.filter(pk=run.pk).update(finished_at=None)
        # A fresh budget: retries + 1 more attempts from here on.
        WorkflowStep.objects.filter(run=run, status=StepStatus.FAILED).update(
            status=StepStatus.PENDING, error=None, wake_at=None,
            retries=F("attempt_count") + F("retries"),
        )
    _continue(run)
    return store.load_run(run.pk)


__all__ = [
    "cancel_run", "get_run_status", "resume_run", "retry_run", "run_to_completion",
    "start_workflow",
]
