"""What the run page tells staff of a run that failed in its workflow body."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from ..models import WorkflowRun
from ..status import RunStatus
from ..step_keys import public_step_name
from .graph_svg import step_anchor


def body_failure(run: WorkflowRun) -> dict[str, Any] | None:
    """The staff-only details of a failure raised by the body itself (not by a step),
    as the engine records them (``engine.orchestrator.body_error``), or None.

    Returns:
        ``type``, ``message``, ``line``, ``traceback``, ``after_step`` (a public step
        name, or None) and ``on_input`` (failed before any step: its input's fault).
    """
    error = run.error or {}
    if run.status != RunStatus.FAILED or "traceback" not in error:
        return None
    after = error.get("after_step")
    return {"type": error.get("type", ""), "message": error.get("message", ""),
            "line": error.get("line", ""), "traceback": error.get("traceback", ""),
            "after_step": public_step_name(after) if isinstance(after, str) else None,
            "after_step_anchor": step_anchor(after) if isinstance(after, str) else "",
            "on_input": "after_step" in error and after is None}


#: Failed runs whose body failed before any step, as a condition (``failed_on_input``):
#: the engine records ``after_step`` as null for them.
FAILED_ON_INPUT = Q(status=RunStatus.FAILED, error__has_key="after_step",
                    error__after_step=None)


def failed_on_input(run: WorkflowRun) -> bool:
    """Whether the run's body failed before reaching any step: a retry replays the same
    input into the same failure, so none is offered."""
    failure = body_failure(run)
    return bool(failure and failure["on_input"])
