"""The adapter to RQ's private API: each accessor reads or sets what RQ's own code uses,
on the installed RQ and a real Redis. An RQ that renames one fails here first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import rq
from rq.job import Job
from rq.queue import Queue
from rq.scheduler import RQScheduler

from pikku_workflows.executors import rq_internals as internals
from pikku_workflows.executors.rq import ORCHESTRATE
from pikku_workflows.executors.worker import PikkuScheduler

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scheduler(redis_conn):
    return RQScheduler(["up-a", "up-b"], connection=redis_conn)


def test_the_installed_rq_has_every_private_member_used(scheduler):
    assert internals.missing_private_api(scheduler) == []


def test_the_installed_rq_is_within_the_range_pyproject_allows():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"rq>=3,<4"' in pyproject
    assert rq.__version__.split(".")[0] == "3"


def test_a_missing_member_is_named(scheduler):
    del scheduler._acquired_locks
    assert internals.missing_private_api(scheduler) == ["RQScheduler._acquired_locks"]


def test_locks_and_queue_names_are_rqs_own(scheduler):
    assert internals.queue_names(scheduler) == {"up-a", "up-b"}
    assert internals.acquired_locks(scheduler) == set()
    internals.set_acquired_locks(scheduler, {"up-a"})
    assert scheduler.acquired_locks == {"up-a"}  # RQ's public property
    # RQ's own lock taking reads the same names and records into the same set.
    assert scheduler.acquire_locks() == {"up-a", "up-b"}
    assert internals.acquired_locks(scheduler) == {"up-a", "up-b"}
    scheduler.release_locks()


def test_registries_are_the_ones_rq_prepares(scheduler):
    assert internals.scheduled_registries(scheduler) == []
    scheduler.prepare_registries(["up-a"])
    [registry] = internals.scheduled_registries(scheduler)
    assert registry.name == "up-a"
    internals.set_scheduled_registries(scheduler, [])
    assert internals.scheduled_registries(scheduler) == []


def test_status_stop_and_process(scheduler):
    assert internals.scheduler_process(scheduler) is None
    internals.mark_working(scheduler)
    assert scheduler.status == RQScheduler.Status.WORKING
    assert internals.stop_requested(scheduler) is False
    scheduler.request_stop()
    assert internals.stop_requested(scheduler) is True


def test_enqueue_job_puts_the_job_on_the_queue(redis_conn):
    queue = Queue("up-a", connection=redis_conn)
    job = Job.create(ORCHESTRATE, args=("x",),
                     connection=redis_conn)
    job.save()
    with redis_conn.pipeline() as pipe:
        internals.enqueue_job(queue, job, pipe, at_front=False)
        pipe.execute()
    assert queue.job_ids == [job.id]


def test_a_scheduler_moves_due_jobs_through_the_adapter(redis_conn):
    """PikkuScheduler's loop body, end to end: a due scheduled job reaches its queue."""
    from datetime import UTC, datetime, timedelta

    queue = Queue("up-a", connection=redis_conn)
    job = queue.enqueue_at(datetime.now(UTC) - timedelta(seconds=1),
                           ORCHESTRATE, "x")
    scheduler = PikkuScheduler([queue], connection=redis_conn)
    assert scheduler.acquire_locks() == {"up-a"}
    scheduler.enqueue_scheduled_jobs()
    scheduler.release_locks()
    assert queue.job_ids == [job.id]


def test_only_the_adapter_touches_rqs_private_names():
    private = re.compile(r"\._(scheduled_job_registries|acquired_locks|queue_names|process|"
                         r"status|stop_requested|install_signal_handlers|enqueue_job)\b")
    package = ROOT / "pikku_workflows"
    offenders = [str(path.relative_to(ROOT)) for path in package.rglob("*.py")
                 if path.name != "rq_internals.py" and private.search(path.read_text())]
    assert offenders == []
