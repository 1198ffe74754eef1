"""The inline executor: passes run in the caller's process, waits sleep in place."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..engine.dispatch import Executor, step_dispatcher
from ..runtime.orchestrator import drive_inline
from ..types import RunId


class InlineExecutor(Executor):
    """Runs everything in the calling process (the default; needs no Redis)."""

    name = "inline"

    def enqueue_pass(self, run_id: RunId, *, at: datetime | None = None,
                     new_run: Any = None, workflow: str | None = None,
                     deadline: datetime | None = None) -> Any:
        leased = new_run if new_run is not None and new_run.lease_owner else None
        return drive_inline(run_id, deadline=deadline, new_run=leased)

    def dispatch_step(self, run_id: RunId, step_name: str, rpc_name: str, *,
                      queue: str | None = None, timeout: float | None = None,
                      at: datetime | None = None,
                      on_sent: Callable[[], None] | None = None) -> None:
        step_dispatcher(True).dispatch_step(run_id, step_name, rpc_name, queue=queue,
                                            timeout=timeout, at=at, on_sent=on_sent)
