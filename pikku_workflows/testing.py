"""Helpers for users' own test suites: run workflows inline, a fake clock, drain RQ queues,
and check that recorded runs still replay (``assert_replays``).

Example::

    from pikku_workflows.testing import drain_queues, fake_clock, run_inline

    def test_order_flow(db):
        with run_inline(), fake_clock() as clock:
            run = pw.start_workflow("process_order", {...})   # sleeps pass instantly
            clock.advance("3d")                               # approval deadlines pass

    def test_on_the_rq_executor(transactional_db):
        run = pw.start_workflow("process_order", {...})       # EXECUTOR "rq": jobs wait
        drain_queues()                                        # ...and run here
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from .durations import parse_duration
from .engine.clock import Clock, install_clock
from .engine.dispatch import all_queue_names, queued_steps_inline, serving
from .executors.rq import connection, get_queue
from .executors.worker import PikkuScheduler, PikkuWorker
from .models import WorkflowScheduleTick
from .replay_checks import check_exported, check_runs, read_exported_runs, runs_to_check
from .runtime.recovery import wake_expired_gates
from .runtime.scheduler import next_due, scheduler_pass, sync_schedules
from .types import RunId


class FakeClock(Clock):
    """A clock whose waits return at once, moving its time forward instead."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or timezone.now()

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._now += timedelta(seconds=seconds)

    def advance(self, duration: float | str) -> None:
        """Move time forward by ``duration``, performing everything that falls due
        meanwhile in time order: schedule ticks and delayed starts (one scheduler pass at
        each moment something is due) and approval deadlines.

        Runs these start follow the ``EXECUTOR`` setting (inline in ``run_inline()``);
        an inline run's own sleeps move this clock further.
        """
        target = self._now + timedelta(seconds=parse_duration(duration))
        moment: datetime | None = self._now - timedelta(microseconds=1)
        while moment is not None:
            due = next_due(moment)
            if due is None or due > target:
                break
            self._now = max(self._now, due)
            moment = due
            wake_expired_gates(self._now)
            scheduler_pass(now=self._now)
        self._now = max(self._now, target)
        wake_expired_gates(self._now)


@contextmanager
def fake_clock(start: datetime | None = None) -> Iterator[FakeClock]:
    """Install a ``FakeClock``: sleeps, retry delays and approval expiry pass instantly."""
    clock = FakeClock(start)
    previous = install_clock(clock)
    try:
        yield clock
    finally:
        install_clock(previous)


@contextmanager
def run_inline() -> Iterator[None]:
    """Run every workflow started inside the block in the calling process.

    Whatever the ``EXECUTOR`` setting says: runs, their child runs and their
    ``queued=True`` steps all run here, and nothing is sent to Redis.
    """
    current = dict(getattr(settings, "PIKKU_WORKFLOWS", None) or {})
    with override_settings(PIKKU_WORKFLOWS={**current, "EXECUTOR": "inline"}), \
            queued_steps_inline():
        yield


def run_scheduler() -> list[WorkflowScheduleTick]:
    """Sync the declared schedules, then run one scheduler pass at the clock's time (use
    ``fake_clock()`` to choose it): due delayed starts and buffered ticks start, due
    ticks are written (missed ones too) and their runs started, inline (as in
    ``run_inline()``; a delayed run created for the ``rq`` executor is enqueued, see
    ``drain_queues``).

    Returns:
        The ticks the pass wrote, in order.
    """
    sync_schedules()
    with run_inline():
        return scheduler_pass()


def drain_queues(*, rounds: int = 50) -> int:
    """Run the jobs waiting in every workflow queue in this process until none is left.

    For tests of projects on the ``rq`` executor: passes, queued steps and wake-ups that
    are due run here, one after the other, like a ``pikku_worker --burst`` would (jobs
    scheduled for later, such as a sleep's wake-up, stay scheduled until a call finds
    them due). Use a test database that commits (pytest-django's ``transactional_db``):
    jobs are enqueued on commit.

    Args:
        rounds: The most burst rounds to run (a job can enqueue more jobs).

    Returns:
        The number of jobs run.
    """
    from rq import SimpleWorker

    ran = 0

    class InProcessWorker(PikkuWorker):
        def execute_job(self, job: Any, queue: Any) -> None:
            nonlocal ran
            ran += 1
            # Not PikkuWorker's: the test's own database connection stays open.
            with serving(self.queue_names()):
                SimpleWorker.execute_job(self, job, queue)

    queues = [get_queue(name) for name in all_queue_names()]
    for _ in range(rounds):
        _enqueue_due_jobs(queues)
        if not any(queue.count for queue in queues):
            break
        worker = InProcessWorker(queues, connection=connection(), serializer=queues[0].serializer)
        worker.work(burst=True, logging_level="WARNING")
    return ran


def _enqueue_due_jobs(queues: list[Any]) -> None:
    """One pass of the scheduler: the scheduled jobs that are due (a wake-up, a pass
    retried after a busy lease) join their queues, as on a burst worker."""
    scheduler = PikkuScheduler(queues, connection=connection(), serializer=queues[0].serializer)
    scheduler.acquire_locks()
    if scheduler.acquired_locks:
        try:
            scheduler.enqueue_scheduled_jobs()
        finally:
            scheduler.release_locks()


def assert_replays(workflow: str | None = None, run_ids: Iterable[RunId] | None = None,
                   path: str | None = None) -> int:
    """Assert that recorded runs replay through the current code (a dry replay: no step
    function is called, nothing is written).

    Args:
        workflow: Only the runs of this workflow.
        run_ids: Only these runs.
        path: Read the runs from this file, written by ``manage.py pikku_export_runs``
            (runs exported from production, say); else from the database.

    Returns:
        How many runs were checked.

    Raises:
        AssertionError: Runs diverge: one line each (run, workflow, the step recorded
            and the step asked, why).
        ValueError: ``path`` is not a runs export.
    """
    if path is not None:
        checked = list(check_exported(read_exported_runs(path), workflow=workflow,
                                      run_ids=run_ids))
    else:
        runs = runs_to_check(workflow=workflow)
        if run_ids is not None:
            runs = runs.filter(pk__in=[str(run_id) for run_id in run_ids])
        checked = list(check_runs(runs))
    diverging = [c for c in checked if c.divergence is not None]
    if diverging:
        lines = [f"{len(diverging)} of {len(checked)} recorded runs do not replay through "
                 "the current code:"]
        lines += [f"  run {c.run_id} ({c.workflow}, {c.status}): recorded "
                  f"{c.divergence.step_recorded!r}, asked {c.divergence.step_asked!r}: "
                  f"{c.divergence.message}" for c in diverging if c.divergence is not None]
        raise AssertionError("\n".join(lines))
    return len(checked)
