"""The one place that touches RQ's private API (rq 3.x), for ``executors.worker``."""

from __future__ import annotations

import inspect
from multiprocessing import Process

from redis.client import Pipeline
from rq.job import Job
from rq.queue import Queue
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler
from rq.scripts import ACQUIRE_OR_REFRESH_LOCK_SCRIPT, acquire_or_refresh_lock
from rq.worker import SimpleWorker

__all__ = [
    "ACQUIRE_OR_REFRESH_LOCK_SCRIPT",
    "acquire_or_refresh_lock",
    "acquired_locks",
    "enqueue_job",
    "install_signal_handlers",
    "mark_working",
    "missing_private_api",
    "queue_names",
    "scheduled_registries",
    "scheduler_process",
    "set_acquired_locks",
    "set_scheduled_registries",
    "stop_requested",
]

#: The private attributes of RQ's scheduler read or set here (set by its ``__init__``).
SCHEDULER_ATTRIBUTES = ("_queue_names", "_acquired_locks", "_scheduled_job_registries",
                        "_process", "_status", "_stop_requested")
#: The private methods relied on, and the parameters passed to or overridden of each.
PRIVATE_METHODS: dict[tuple[type, str], tuple[str, ...]] = {
    (RQScheduler, "_install_signal_handlers"): (),
    (Queue, "_enqueue_job"): ("job", "pipeline", "at_front"),
    # PikkuWorker overrides these two (RQ's worker calls the first, RQ's pubsub the other).
    (SimpleWorker, "_start_scheduler"): ("burst", "logging_level", "date_format",
                                         "log_format"),
    (SimpleWorker, "_pubsub_exception_handler"): ("exc", "pubsub", "pubsub_thread"),
}


def missing_private_api(scheduler: RQScheduler) -> list[str]:
    """What of RQ's private API the installed RQ lacks (empty when all is there).

    Args:
        scheduler: A scheduler built by RQ's ``__init__`` (its attributes are checked).

    Returns:
        One line per missing attribute, method or parameter.
    """
    missing = [f"RQScheduler.{name}" for name in SCHEDULER_ATTRIBUTES
               if not hasattr(scheduler, name)]
    for (owner, name), params in PRIVATE_METHODS.items():
        method = getattr(owner, name, None)
        if method is None:
            missing.append(f"{owner.__name__}.{name}()")
            continue
        present = inspect.signature(method).parameters
        missing += [f"{owner.__name__}.{name}({param}=)" for param in params
                    if param not in present]
    return missing


def queue_names(scheduler: RQScheduler) -> set[str]:
    """The names of the queues the scheduler serves."""
    names: set[str] = scheduler._queue_names
    return names


def acquired_locks(scheduler: RQScheduler) -> set[str]:
    """The queues whose scheduler lock this scheduler holds (RQ's ``acquired_locks``)."""
    held: set[str] = scheduler._acquired_locks
    return held


def set_acquired_locks(scheduler: RQScheduler, names: set[str]) -> None:
    """Record the queues whose lock the scheduler holds."""
    scheduler._acquired_locks = names


def scheduled_registries(scheduler: RQScheduler) -> list[ScheduledJobRegistry]:
    """The scheduled-job registries the scheduler moves due jobs from."""
    registries: list[ScheduledJobRegistry] = scheduler._scheduled_job_registries
    return registries


def set_scheduled_registries(scheduler: RQScheduler,
                             registries: list[ScheduledJobRegistry]) -> None:
    """Replace the scheduler's registries (empty: rebuilt by its next ``prepare_registries``)."""
    scheduler._scheduled_job_registries = registries


def scheduler_process(scheduler: RQScheduler) -> Process | None:
    """The scheduler's own process, once started."""
    process: Process | None = scheduler._process
    return process


def mark_working(scheduler: RQScheduler) -> None:
    """Set the scheduler's status to working (RQ's ``status``), as its own loop does."""
    scheduler._status = scheduler.Status.WORKING


def stop_requested(scheduler: RQScheduler) -> bool:
    """Whether a stop was requested (``request_stop``, a signal)."""
    return bool(scheduler._stop_requested)


def install_signal_handlers(scheduler: RQScheduler) -> None:
    """RQ's SIGINT and SIGTERM handlers of the scheduler process (a stop request)."""
    scheduler._install_signal_handlers()  # type: ignore[no-untyped-call]  # RQ: untyped


def enqueue_job(queue: Queue, job: Job, pipeline: Pipeline, *, at_front: bool) -> None:
    """Put ``job`` on ``queue`` in ``pipeline``, its dependencies already met."""
    queue._enqueue_job(job, pipeline=pipeline, at_front=at_front)
