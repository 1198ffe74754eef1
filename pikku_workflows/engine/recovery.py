"""Recovery: re-drive runs from their rows when nothing else will (the database is the truth)."""

from __future__ import annotations

from typing import Any

from ..models import WorkflowStep
from ..status import RunStatus, StepStatus
from . import store
from .clock import clock


def wake_expired_gates(now: Any = None) -> list[Any]:
    """Give a pass to suspended runs whose approval deadline has passed.

    Returns:
        The ids of the runs woken.
    """
    from ..executors import get_executor

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
