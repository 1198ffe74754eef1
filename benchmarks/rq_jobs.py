"""Plain RQ job functions of the peer comparisons, run by plain ``rq worker`` processes."""

from __future__ import annotations

from typing import Any

QUEUE = "bench-plain-rq"
NOOP = "benchmarks.rq_jobs.noop"
JOIN = "benchmarks.rq_jobs.join"


def noop(value: Any) -> Any:
    """A no-op job."""
    return value


def join() -> int:
    """The join of a fan-out: sums the results of the jobs it depends on."""
    from rq import get_current_job

    job = get_current_job()
    assert job is not None
    return sum(dep.return_value() or 0 for dep in job.fetch_dependencies())


def plain_queue() -> Any:
    """The plain RQ queue, on the Redis connection pikku uses, JSON-serialized like ours."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from benchmarks.harness import redis_connection

    return Queue(QUEUE, connection=redis_connection(), serializer=JSONSerializer)


def rescue_stranded(queue: Any) -> list[Any]:
    """Enqueue dependents RQ 3.0 left in its ready registry; returns them.

    When two workers finish parents at once, one loses the WATCH on the queue's shared
    ready registry and leaves its dependent there for the worker's maintenance pass
    (every 10 minutes by default). The peer is measured without that stall: the driver
    runs the same recovery on each of its polls.
    """
    return queue.ready_job_registry.cleanup()
