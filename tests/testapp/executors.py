"""A third executor, for the tests of the executor port: passes and queued steps on a
thread pool, sleeps and retry delays on timers it schedules itself."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, connection, transaction

from pikku_workflows.engine.clock import clock
from pikku_workflows.engine.dispatch import Executor
from pikku_workflows.runtime.orchestrator import drive_queued
from pikku_workflows.runtime.step_worker import run_queued_step

#: The queue whose steps ``Threads`` declines: they run in the run's pass.
DECLINED_QUEUE = "not-on-threads"


class Threads(Executor):
    """Every job a task of one thread pool; a job due later waits on a timer."""

    name = "threads"
    takes_sleeps = True

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pikku-threads")
        self.jobs: list[tuple[str, tuple[Any, ...]]] = []
        self.errors: list[BaseException] = []
        self.waited_in_place = 0

    def _run(self, job: Callable[..., Any], *args: Any) -> None:
        close_old_connections()
        try:
            job(*args)
        except BaseException as exc:
            self.errors.append(exc)
            raise
        finally:
            connection.close()

    def _send(self, at: datetime | None, job: Callable[..., Any], *args: Any,
              on_sent: Callable[[], None] | None = None) -> None:
        """The job goes once the caller's transaction commits (its rows are there)."""
        def send() -> None:
            self.jobs.append((job.__name__, args))
            delay = (at - clock().now()).total_seconds() if at is not None else 0.0
            if delay > 0:
                timer = threading.Timer(delay, self.pool.submit, (self._run, job, *args))
                timer.daemon = True
                timer.start()
            else:
                self.pool.submit(self._run, job, *args)
            if on_sent is not None:
                on_sent()

        transaction.on_commit(send)

    def enqueue_pass(self, run_id: Any, *, at: datetime | None = None, new_run: Any = None,
                     workflow: str | None = None, deadline: datetime | None = None) -> None:
        self._send(at, drive_queued, str(run_id))

    def dispatch_step(self, run_id: Any, step_name: str, rpc_name: str, *,
                      queue: str | None = None, timeout: float | None = None,
                      at: datetime | None = None,
                      on_sent: Callable[[], None] | None = None) -> None:
        self._send(at, run_queued_step, str(run_id), step_name, rpc_name, on_sent=on_sent)

    def accepts_step(self, rpc_name: str, queue: str | None) -> bool:
        return queue != DECLINED_QUEUE

    def schedule_wakeup(self, run_id: Any, step_name: str, at: datetime, *,
                        workflow: str | None = None) -> bool:
        if not self.takes_sleeps:
            self.waited_in_place += 1
            return False
        self.enqueue_pass(run_id, at=at)
        return True

    def retry_busy(self, run_id: Any) -> None:
        self.enqueue_pass(run_id, at=clock().now() + timedelta(milliseconds=50))


class ThreadsWithoutSleeps(Threads):
    """Declines every wake-up: the thread that ran the pass waits in place."""

    takes_sleeps = False
