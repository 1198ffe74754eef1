"""The inline executor: passes run in the caller's process, waits sleep in place."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..exceptions import WorkflowConfigurationError
from .base import Executor


class InlineExecutor(Executor):
    """Runs everything in the calling process (the default; needs no Redis)."""

    name = "inline"

    def enqueue_pass(self, run_id: Any, *, at: datetime | None = None,
                     deadline: datetime | None = None) -> Any:
        from ..engine.orchestrator import drive_inline

        return drive_inline(run_id, deadline=deadline)

    def dispatch_step(self, run_id: Any, step_name: str, rpc_name: str, *,
                      queue: str | None = None, timeout: float | None = None) -> None:
        raise WorkflowConfigurationError(
            f"step '{step_name}' runs function '{rpc_name}' with queued=True, which needs "
            "the RQ executor; inline runs cannot dispatch to workers"
        )
