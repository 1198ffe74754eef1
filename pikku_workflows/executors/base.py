"""The executor interface: the only thing the engine knows about transports."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from typing import Any


class Executor(ABC):
    """Moves work to a process: an orchestrator pass, a queued step, a wake-up.

    The database rows are written before any of these is called; an executor only
    carries ids. Losing what it carried loses nothing: recovery re-drives from rows.
    """

    name: str = "base"

    @abstractmethod
    def enqueue_pass(self, run_id: Any, *, at: datetime | None = None,
                     new_run: Any = None, workflow: str | None = None,
                     deadline: datetime | None = None) -> Any:
        """Arrange for one orchestrator pass of the run (now, or at ``at``).

        ``new_run`` is the run's row when the caller just created it (inline runs are
        created leased by their process, so that the first pass skips taking the lease);
        ``workflow``, the run's workflow name when the caller knows it; ``deadline``, when
        an inline caller stops waiting (``run_to_completion``'s timeout).
        """

    @abstractmethod
    def dispatch_step(self, run_id: Any, step_name: str, rpc_name: str, *,
                      queue: str | None = None, timeout: float | None = None,
                      at: datetime | None = None,
                      on_sent: Callable[[], None] | None = None) -> None:
        """Arrange for a queued step to run on a step worker."""

    def schedule_wakeup(self, run_id: Any, step_name: str, at: datetime, *,
                        workflow: str | None = None) -> None:
        """Arrange for the run to continue when a sleep or retry delay ends."""
        self.enqueue_pass(run_id, at=at, workflow=workflow)

    def retry_busy(self, run_id: Any) -> None:  # noqa: B027 - optional hook
        """A pass found the run's lease taken: the holder drives it; nothing by default."""
