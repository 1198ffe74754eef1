"""Durable workflows for Django: plain Python workflows, every step recorded in your database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Concurrency",
    "Debounce",
    "SendResult",
    "StepContext",
    "WorkflowApprovalForbiddenError",
    "WorkflowApprovalResolvedError",
    "WorkflowConfigurationError",
    "WorkflowContext",
    "WorkflowDefinitionError",
    "WorkflowError",
    "WorkflowForkError",
    "WorkflowIdempotencyError",
    "WorkflowInputError",
    "WorkflowNotFoundError",
    "WorkflowRunCancelledError",
    "WorkflowRunFailedError",
    "WorkflowRunNotFoundError",
    "WorkflowRunStateError",
    "WorkflowRunSuspendedError",
    "WorkflowScheduleError",
    "WorkflowStepFailedError",
    "WorkflowStepFunctionMismatchError",
    "WorkflowUnknownGateError",
    "WorkflowVersionDeclinedError",
    "approve_step",
    "cancel_run",
    "fork_run",
    "function",
    "get_run_status",
    "graph_workflow",
    "job_started",
    "ref",
    "resume_run",
    "retry_run",
    "run_cancelled",
    "run_completed",
    "run_failed",
    "run_failure_alert",
    "run_started",
    "run_suspended",
    "run_to_completion",
    "schedule",
    "send",
    "send_event",
    "start_workflow",
    "step_failed",
    "step_retried",
    "step_succeeded",
    "template",
    "workflow",
]

# Names resolve on first use, so that importing the package (as Django does while
# reading INSTALLED_APPS) does not import models before the app registry is ready.
_LAZY = {
    "function": "decorators", "workflow": "decorators", "graph_workflow": "decorators",
    "schedule": "decorators",
    "Concurrency": "declarations", "Debounce": "declarations",
    "ref": "graph.values", "template": "graph.values",
    "start_workflow": "operations", "run_to_completion": "operations",
    "get_run_status": "operations", "resume_run": "operations", "cancel_run": "operations",
    "retry_run": "operations", "approve_step": "operations", "fork_run": "operations",
    "send_event": "operations", "send": "operations", "SendResult": "operations",
    "WorkflowContext": "dsl.context", "StepContext": "dsl.context",
    # Django signals (docs/signals.md).
    "run_started": "signals", "run_completed": "signals", "run_failed": "signals",
    "run_suspended": "signals", "run_cancelled": "signals", "run_failure_alert": "signals",
    "step_succeeded": "signals",
    "step_failed": "signals", "step_retried": "signals",
    "job_started": "signals",
}

if TYPE_CHECKING:
    from .declarations import Concurrency, Debounce
    from .decorators import function, graph_workflow, schedule, workflow
    from .dsl.context import StepContext, WorkflowContext
    from .graph.values import ref, template
    from .operations import (
        SendResult,
        approve_step,
        cancel_run,
        fork_run,
        get_run_status,
        resume_run,
        retry_run,
        run_to_completion,
        send,
        send_event,
        start_workflow,
    )
    from .signals import (
        job_started,
        run_cancelled,
        run_completed,
        run_failed,
        run_failure_alert,
        run_started,
        run_suspended,
        step_failed,
        step_retried,
        step_succeeded,
    )

from .exceptions import (  # noqa: E402 - no Django imports in exceptions
    WorkflowApprovalForbiddenError,
    WorkflowApprovalResolvedError,
    WorkflowConfigurationError,
    WorkflowDefinitionError,
    WorkflowError,
    WorkflowForkError,
    WorkflowIdempotencyError,
    WorkflowInputError,
    WorkflowNotFoundError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
    WorkflowRunNotFoundError,
    WorkflowRunStateError,
    WorkflowRunSuspendedError,
    WorkflowScheduleError,
    WorkflowStepFailedError,
    WorkflowStepFunctionMismatchError,
    WorkflowUnknownGateError,
    WorkflowVersionDeclinedError,
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pikku_workflows' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
