"""The run detail dict shared by ``get_run_status`` and the REST API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Prefetch

from ..models import StepAttempt, WorkflowRun, WorkflowStep


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def step_duration_ms(step: WorkflowStep, attempts: list[StepAttempt]) -> int | None:
    """Time of the latest attempt, from running (or creation) to its end."""
    if not attempts:
        return None
    last = attempts[-1]
    end = last.succeeded_at or last.failed_at
    if end is None:
        return None
    return round((end - (last.running_at or last.created_at)).total_seconds() * 1000)


def public_error(error: dict | None) -> dict | None:
    """The error as API users see it: message, code and step; never a traceback."""
    if not error:
        return None
    return {k: error[k] for k in ("message", "code", "step") if k in error}


def run_detail(run: WorkflowRun, steps: list[WorkflowStep] | None = None) -> dict[str, Any]:
    """The run detail dict (DESIGN section 4), JSON-ready."""
    if steps is None:
        steps = list(
            WorkflowStep.objects.filter(run=run).prefetch_related(
                Prefetch("attempts", queryset=StepAttempt.objects.order_by("attempt"))
            )
        )
    return {
        "id": str(run.pk),
        "workflow": run.workflow,
        "status": run.status,
        "input": run.input,
        "output": run.output if run.status == "completed" else None,
        "error": public_error(run.error),
        "owner": run.owner_id,
        "parent_run": str(run.parent_run_id) if run.parent_run_id else None,
        "graph_hash": run.graph_hash,
        "inline": run.inline,
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
        "finished_at": _iso(run.finished_at),
        "steps": [
            {
                "name": step.step_name,
                "status": step.status,
                "attempts": step.attempt_count,
                "rpc_name": step.rpc_name,
                "duration_ms": step_duration_ms(step, list(step.attempts.all())),
                "branch_taken": step.branch_taken,
                "child_run": str(step.child_run_id) if step.child_run_id else None,
            }
            for step in steps
        ],
    }
