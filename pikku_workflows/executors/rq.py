"""The RQ executor: orchestrator passes and queued steps as jobs on Redis queues.

Jobs carry ids only (serialized as JSON, never pickled); every row they refer to is
committed before they are enqueued, so losing Redis loses no run.

``rq`` and ``django_rq`` are imported where they are used: importing them is slow, and
an inline-only process (the default executor) never needs them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..conf import pikku_settings
from ..engine import store
from ..engine.batching import Batch
from ..engine.dispatch import (
    Executor,
    all_queue_names,
    orchestrator_queue_name,
    step_queue_name,
    wake_queue_name,
)
from ..exceptions import WorkflowConfigurationError
from ..models import WorkflowRun
from ..registry import registry
from ..runtime.orchestrator import drive_queued
from ..types import RunId

logger = logging.getLogger("pikku_workflows.rq")
# The recovery sweep reads the queues' backlog through ``oldest_waiting_job``.
recovery_logger = logging.getLogger("pikku_workflows.recovery")

ORCHESTRATE = "pikku_workflows.executors.jobs.orchestrate"
RUN_STEP = "pikku_workflows.executors.jobs.run_queued_step"
DRAIN_STEPS = "pikku_workflows.executors.jobs.run_queued_steps"
WAKE_DUE = "pikku_workflows.executors.jobs.wake_due"
# The only functions a pikku_worker executes: a forged job naming anything else runs nothing.
JOB_FUNCTIONS = frozenset({ORCHESTRATE, RUN_STEP, DRAIN_STEPS, WAKE_DUE})
# Wake-ups falling due within this many milliseconds share one job, which carries on at
# most this many runs before handing the rest to a new one.
WAKE_BUCKET_MS = 100
WAKE_BATCH = 500
# A pass that finds the run's lease taken tries again after this many seconds.
BUSY_RETRY_DELAY = 0.5
# No RQ job timeout (-1): a step's own timeout is enforced around its body by the worker,
# so that it never cuts short the pass the same job runs afterwards.
NO_TIMEOUT = -1
# A finished job's hash expires after a minute: RQ deletes a job with result_ttl=0 at
# once, which costs its worker four more Redis round trips (reads of its status and
# executions) per job; an expiry costs none. Every job has a random id of its own.
JOB_TTLS: dict[str, Any] = {"result_ttl": 60, "failure_ttl": 86400}
# How long a wake-up window remembers its job (the window is at most this far ahead).
WAKE_CLAIM_TTL = 3600

_jobs = Batch(lambda jobs: transaction.on_commit(lambda: _send_many(jobs)))
# The jobs enqueued in this block (without delay) go out in one Redis round trip per
# queue when it ends, after the current transaction commits (a fan-out's steps).
batched = _jobs.collecting


# Redis clients by (process, alias, configuration): one connection pool each, reused by
# every enqueue (django_rq.get_connection builds a new client, and so a new TCP
# connection, on every call).
_clients: dict[tuple[int, str, str], Any] = {}


def connection() -> Any:
    """The Redis connection of the ``RQ_CONNECTION`` alias of ``RQ_QUEUES``."""
    import django_rq
    from django.conf import settings

    alias = pikku_settings.RQ_CONNECTION
    queues = getattr(settings, "RQ_QUEUES", {})
    key = (os.getpid(), alias, repr(queues.get(alias)))
    client = _clients.get(key)
    if client is not None:
        return client
    try:
        client = django_rq.get_connection(alias)
    except KeyError:
        raise WorkflowConfigurationError(
            f"the RQ executor needs RQ_QUEUES['{alias}'] in settings (PIKKU_WORKFLOWS"
            "['RQ_CONNECTION'] names the alias whose Redis connection it uses)"
        ) from None
    if len(_clients) > 32:  # settings overridden many times (tests): keep it bounded
        _clients.clear()
    _clients[key] = client
    return client


def get_queue(name: str) -> Any:
    from rq import Queue
    from rq.serializers import JSONSerializer

    return Queue(name, connection=connection(), serializer=JSONSerializer)


def worker_health() -> list[dict[str, Any]]:
    """The RQ workers registered on the workflow queues, with their last heartbeat."""
    from rq import Worker

    names = set(all_queue_names())
    return [
        {"name": w.name, "queues": w.queue_names(), "state": str(w.get_state()),
         "last_heartbeat": w.last_heartbeat, "hostname": w.hostname, "pid": w.pid}
        for w in Worker.all(connection=connection())
        if names & set(w.queue_names())
    ]


def _enqueue(queue_name: str, func: str, args: list[Any], *, at: datetime | None,
             on_sent: Callable[[], None] | None = None, claim: str | None = None) -> None:
    """Enqueue after the current transaction commits; a Redis error is logged, not raised.

    The rows already say what must happen, so the recovery sweep re-drives anything
    whose job never made it to Redis. With ``claim`` (a Redis key naming the job sent for
    the same purpose), nothing is sent while that job is still scheduled: it will start
    after this commit, and do what this one would.
    """
    if at is None and _jobs.add((queue_name, func, args, on_sent)):
        return

    def send() -> None:
        from rq import Queue

        try:
            queue = get_queue(queue_name)
            options: dict[str, Any] = {"job_timeout": NO_TIMEOUT, **JOB_TTLS}
            if at is not None and at > timezone.now():
                if claim is not None and _still_scheduled(queue, claim):
                    return
                with queue.connection.pipeline() as pipe:
                    job = queue.enqueue_at(at, func, *args, pipeline=pipe, **options)
                    # RQ scores scheduled jobs in whole seconds (truncated), which would
                    # move this one up to a second early: the exact time, in the same
                    # transaction, so that no scheduler sees the early score.
                    pipe.zadd(queue.scheduled_job_registry.key, {job.id: at.timestamp()})
                    if claim is not None:
                        pipe.set(claim, job.id, ex=WAKE_CLAIM_TTL)
                    pipe.execute()
            else:
                # One round trip (queue.enqueue takes two).
                with queue.connection.pipeline() as pipe:
                    queue.enqueue_many([Queue.prepare_data(
                        func, args, timeout=options.pop("job_timeout"), **options)],
                        pipeline=pipe)
                    pipe.execute()
        except Exception:
            logger.warning("could not enqueue %s%s on %s; recovery will re-drive it",
                           func.rsplit(".", 1)[-1], tuple(args), queue_name, exc_info=True)
            return
        if on_sent is not None:
            on_sent()

    transaction.on_commit(send)


def _send_many(jobs: list[tuple[str, str, list[Any], Callable[[], None] | None]]) -> None:
    from rq import Queue

    by_queue: dict[str, list[Any]] = {}
    for job in jobs:
        by_queue.setdefault(job[0], []).append(job)
    for queue_name, queued in by_queue.items():
        try:
            queue = get_queue(queue_name)
            calls = _drained(queue, queued)
            with queue.connection.pipeline() as pipe:
                queue.enqueue_many([Queue.prepare_data(func, args, timeout=NO_TIMEOUT,
                                                       **JOB_TTLS)
                                    for func, args in calls], pipeline=pipe)
                pipe.execute()
        except Exception:
            logger.warning("could not enqueue %d jobs on %s; recovery will re-drive them",
                           len(queued), queue_name, exc_info=True)
            continue
        with store.batched_marks():
            for *_, on_sent in queued:
                if on_sent is not None:
                    on_sent()


def _drained(queue: Any, queued: list[Any]) -> list[tuple[str, list[Any]]]:
    """The jobs to send for one queue's share of a fan-out.

    A run's several step jobs become a few drain jobs that share its steps: about two per
    worker serving the queue (at least two, at most one per step). A fan-out then costs
    one job per worker rather than one per step, and any number of workers still share it.
    """
    from rq import Worker

    calls: list[tuple[str, list[Any]]] = []
    by_run: dict[str, list[list[Any]]] = {}
    for _, func, args, _ in queued:
        if func == RUN_STEP:
            by_run.setdefault(args[0], []).append(args)
        else:
            calls.append((func, args))
    workers = Worker.count(connection=queue.connection, queue=queue) if by_run else 0
    for run_id, steps in by_run.items():
        if len(steps) == 1:
            calls.append((RUN_STEP, steps[0]))
            continue
        rpc_names = sorted({rpc for _, _, rpc in steps})
        drainers = min(len(steps), max(2, 2 * workers))
        calls += [(DRAIN_STEPS, [run_id, rpc_names])] * drainers
    return calls


def _still_scheduled(queue: Any, claim: str) -> bool:
    """Whether the job ``claim`` names waits in ``queue``'s scheduled registry (not yet
    moved to the queue, so not started)."""
    job_id = queue.connection.get(claim)
    return job_id is not None and \
        queue.connection.zscore(queue.scheduled_job_registry.key, job_id) is not None


def _schedule_wake_due(queue: str, at: datetime) -> None:
    """One ``wake_due`` job per orchestrator queue and 100 ms window wakes every run due
    by then. A wake-up whose window's job is still scheduled sends nothing: that job
    starts after this wake-up's row committed, and finds it due. Once the window's job is
    on its queue (it may be running), a wake-up sends a job of its own."""
    bucket = -(-int(at.timestamp() * 1000) // WAKE_BUCKET_MS) * WAKE_BUCKET_MS
    due = datetime.fromtimestamp(bucket / 1000, tz=UTC)
    _enqueue(wake_queue_name(queue), WAKE_DUE, [queue], at=due,
             claim=f"pikku:wake-job:{queue}:{bucket}")


def wake_due(queue: str) -> int:
    """Pass every run of orchestrator queue ``queue`` whose sleep or retry delay is over.

    Runs another process holds are skipped (it carries them on). Returns how many runs
    were passed; past ``WAKE_BATCH`` the rest goes to a new wake-up job.
    """
    workflows = [d.name for d in registry.workflows()
                 if orchestrator_queue_name(d.name) == queue]
    due = store.due_runs(workflows, limit=WAKE_BATCH)
    for run_id in due:
        drive_queued(run_id, retry_busy=False)
    if len(due) == WAKE_BATCH:
        _schedule_wake_due(queue, timezone.now())
    return len(due)


def _workflow_of(run_id: RunId, workflow: str | None) -> str:
    """The run's workflow name: ``workflow`` if the caller knew it, else read."""
    if workflow is not None:
        return workflow
    return WorkflowRun.objects.filter(pk=run_id).values_list("workflow", flat=True).first() \
        or ""


class RQExecutor(Executor):
    """Runs passes and queued steps on ``pikku_worker`` processes through RQ."""

    name = "rq"

    def enqueue_pass(self, run_id: RunId, *, at: datetime | None = None,
                     new_run: Any = None, workflow: str | None = None,
                     deadline: datetime | None = None) -> None:
        if workflow is None and new_run is not None:
            workflow = new_run.workflow
        queue = orchestrator_queue_name(_workflow_of(run_id, workflow))
        # A new run's first pass queues behind the runs started before it. Every other
        # pass (a child's start, a parent woken, a resume, a recovery) carries on a run
        # in flight: it goes to the queue workers serve first, with the wake-ups, so a
        # backlog of new runs never holds it up.
        _enqueue(queue if new_run is not None else wake_queue_name(queue), ORCHESTRATE,
                 [str(run_id)], at=at)

    def dispatch_step(self, run_id: RunId, step_name: str, rpc_name: str, *,
                      queue: str | None = None, timeout: float | None = None,
                      at: datetime | None = None,
                      on_sent: Callable[[], None] | None = None) -> None:
        # ``timeout`` is enforced by the worker around the step's body (see step_worker).
        _enqueue(queue or step_queue_name(rpc_name), RUN_STEP,
                 [str(run_id), step_name, rpc_name], at=at, on_sent=on_sent)

    def schedule_wakeup(self, run_id: RunId, step_name: str, at: datetime, *,
                        workflow: str | None = None) -> bool:
        _schedule_wake_due(orchestrator_queue_name(_workflow_of(run_id, workflow)), at)
        return True

    def retry_busy(self, run_id: RunId) -> None:
        self.enqueue_pass(run_id, at=timezone.now() + timedelta(seconds=BUSY_RETRY_DELAY))

    def batched(self) -> AbstractContextManager[None]:
        return _jobs.collecting()

    def oldest_waiting_job(self) -> datetime | None:
        from rq.exceptions import NoSuchJobError
        from rq.job import Job

        oldest = None
        try:
            for name in all_queue_names():
                queue = get_queue(name)
                for job_id in queue.get_job_ids(0, 1):
                    try:
                        job = Job.fetch(job_id, connection=queue.connection,
                                        serializer=queue.serializer)
                    except NoSuchJobError:
                        continue  # taken (and deleted) since: no backlog behind it
                    if job.enqueued_at is not None and \
                            (oldest is None or job.enqueued_at < oldest):
                        oldest = job.enqueued_at
        except Exception:
            recovery_logger.warning("could not read the queues' backlog; sweeping as if "
                                    "empty", exc_info=True)
            return None
        if oldest is not None and timezone.is_naive(oldest):
            oldest = oldest.replace(tzinfo=UTC)
        return oldest
