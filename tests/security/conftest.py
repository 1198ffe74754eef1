"""What the security tests share: a snapshot of every workflow row, to assert that a
refused request or job changed nothing; the API clients are in tests/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest

from pikku_workflows.models import (
    StepAttempt,
    WorkflowEvent,
    WorkflowMessage,
    WorkflowRun,
    WorkflowStep,
)


def nested(levels: int) -> list:
    """``levels`` lists, each inside the one before (``nested(2) == [[]]``), built
    without recursion."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def snapshot() -> dict[str, Any]:
    """Every run, step, attempt, event and message row, as comparable tuples (updated_at
    included, so that even a touch counts as a change)."""
    return {
        "runs": sorted(WorkflowRun.objects.values_list(
            "id", "status", "input", "output", "error", "state", "updated_at", "finished_at",
            "lease_owner")),
        "steps": sorted(WorkflowStep.objects.values_list(
            "id", "run_id", "step_name", "rpc_name", "status", "data", "result", "error",
            "attempt_count", "wake_at", "updated_at")),
        "attempts": sorted(StepAttempt.objects.values_list(
            "id", "step_id", "attempt", "status", "result", "error")),
        "events": sorted(WorkflowEvent.objects.values_list("id", "event", "key", "data")),
        "messages": sorted(WorkflowMessage.objects.values_list(
            "id", "run_id", "topic", "data", "received_at")),
    }


@pytest.fixture
def unchanged():
    """``unchanged()`` takes a snapshot; calling what it returns asserts nothing changed."""

    def take() -> Any:
        before = snapshot()

        def check() -> None:
            after = snapshot()
            for table in before:
                assert after[table] == before[table], f"{table} changed"
        return check
    return take
