"""The RQ executor: orchestrator passes and queued steps as jobs on Redis queues.

Jobs carry ids only (serialized as JSON, never pickled); every row they refer to is
committed before they are enqueued, so losing Redis loses no run.

``rq`` and ``django_rq`` are imported where they are used: importing them is slow, and
an inline-only process (the default executor) never needs them.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from django.db import close_old_connections, transaction
from django.utils import timezone

from ..conf import pikku_settings
from ..engine import store
from ..engine.batching import Batch
from ..engine.dispatch import (
    Executor,
    all_queue_names,
    orchestrator_queue_name,
    orchestrator_queue_names,
    step_queue_name,
    wake_queue_name,
)
from ..exceptions import WorkflowConfigurationError, WorkflowRunNotFoundError
from ..models import WorkflowRun
from ..registry import registry
from ..runtime.orchestrator import drive_queued
from ..signals import job_started, send_job_started
from ..types import RunId

logger = logging.getLogger("pikku_workflows.rq")
# The recovery sweep reads the queues' backlog through ``oldest_waiting_job``.
recovery_logger = logging.getLogger("pikku_workflows.recovery")

ORCHESTRATE = "pikku_workflows.executors.jobs.orchestrate"
RUN_STEP = "pikku_workflows.executors.jobs.run_queued_step"
DRAIN_STEPS = "pikku_workflows.executors.jobs.run_queued_steps"
WAKE_DUE = "pikku_workflows.executors.jobs.wake_due"
RUN_PASSES = "pikku_workflows.executors.jobs.run_passes"
# The only functions a pikku_worker executes: a forged job naming anything else runs nothing.
JOB_FUNCTIONS = frozenset({ORCHESTRATE, RUN_STEP, DRAIN_STEPS, WAKE_DUE, RUN_PASSES})
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
# A delayed job's due time (POSIX seconds) in its meta: its schedule-to-start latency
# counts from then (RQ's ``enqueued_at`` is when the scheduler moved it to its queue,
# which hides a scheduler that is late).
DUE_META = "pikku_due"
# How long a wake-up window remembers its job (the window is at most this far ahead).
WAKE_CLAIM_TTL = 3600
# A job that runs the passes of woken runs (``run_passes``) hands the rest to a new job
# after this many seconds, so that it never keeps its worker from the other queues.
PASSES_JOB_SECONDS = 1.0
# How long a queue's "a passes job is on its way" mark lives if that job never starts
# (its worker died before): the next woken run then sends a job again.
PASSES_CLAIM_TTL = 60

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


#: Fields a ``pikku_worker`` adds to its RQ worker hash at birth, naming the code it runs:
#: the pikku_workflows version and the fingerprint of its definitions (its heartbeats keep
#: the hash, and a clean stop removes it, as for RQ's own fields).
VERSION_FIELD = "pikku_version"
DEFINITIONS_FIELD = "pikku_definitions"

#: What a job of each function does: an orchestrator pass (or the wake-ups that start
#: passes) or a queued step (or a fan-out's steps).
JOB_KINDS = {ORCHESTRATE: "pass", WAKE_DUE: "pass", RUN_PASSES: "pass", RUN_STEP: "step",
             DRAIN_STEPS: "step"}


def job_kind(func_name: str | None) -> str | None:
    """``"pass"`` or ``"step"`` for pikku's job functions; None for any other."""
    return JOB_KINDS.get(func_name or "")


def job_ready_at(job: Any) -> datetime | None:
    """When ``job`` became ready to run: its due time if it was delayed, else when it was
    enqueued (None if RQ recorded neither)."""
    due = (job.meta or {}).get(DUE_META)
    if isinstance(due, int | float):
        return datetime.fromtimestamp(due, tz=UTC)
    enqueued: datetime | None = job.enqueued_at
    if enqueued is not None and timezone.is_naive(enqueued):
        enqueued = enqueued.replace(tzinfo=UTC)
    return enqueued


class CurrentJob(TypedDict):
    """The job a worker is running, as the workers page shows it."""

    id: str
    kind: str | None
    description: str
    run_id: str | None
    step: str | None
    queue: str
    started_at: datetime | None


class LiveWorker(TypedDict):
    """A live RQ worker of the workflow queues (``worker_health``)."""

    name: str
    queues: list[str]
    state: str
    last_heartbeat: datetime | None
    hostname: str | None
    pid: int | None
    birth: datetime | None
    #: The pikku_workflows version and definitions fingerprint it recorded at birth (None:
    #: not a ``pikku_worker``, or not asked for).
    version: str | None
    definitions: str | None
    #: The jobs it runs now (asked for with ``details``).
    current_jobs: list[CurrentJob]


def worker_health(*, details: bool = False) -> list[LiveWorker]:
    """The RQ workers alive on the workflow queues: the one liveness rule of the console.

    A worker counts while RQ's worker registry holds it and its key has not lapsed (each
    heartbeat keeps it for the worker's TTL + 60 s; a clean stop removes it at once), and
    only if it serves one of the workflow queues (a project's other ``rqworker`` does not).

    Args:
        details: Also read what code each runs and its current jobs (a few more Redis
            round trips: the workers page; the runs list's banner needs none).

    Raises:
        redis.exceptions.RedisError: Redis cannot be reached.
    """
    from rq import Worker

    redis = connection()
    names = set(all_queue_names())
    alive = [w for w in Worker.all(connection=redis) if names & set(w.queue_names())]
    workers: list[LiveWorker] = [
        {"name": w.name, "queues": w.queue_names(), "state": str(w.get_state()),
         "last_heartbeat": w.last_heartbeat, "hostname": w.hostname, "pid": w.pid,
         "birth": w.birth_date, "version": None, "definitions": None, "current_jobs": []}
        for w in alive
    ]
    if details and alive:
        with redis.pipeline(transaction=False) as pipe:
            for w in alive:
                pipe.hmget(w.key, [VERSION_FIELD, DEFINITIONS_FIELD])
            codes = pipe.execute()
        for worker, (version, definitions) in zip(workers, codes, strict=True):
            worker["version"] = _text(version)
            worker["definitions"] = _text(definitions)
        for worker, w in zip(workers, alive, strict=True):
            worker["current_jobs"] = _current_jobs(w)
    return workers


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _current_jobs(worker: Any) -> list[CurrentJob]:
    """The jobs ``worker`` runs now (its RQ executions), described."""
    from rq.job import Job
    from rq.serializers import JSONSerializer

    executions = worker.get_current_executions()
    if not executions:
        return []
    jobs = Job.fetch_many([e.job_id for e in executions], connection=worker.connection,
                          serializer=JSONSerializer)
    return [describe_job(execution.job_id, job, execution.created_at)
            for execution, job in zip(executions, jobs, strict=True)]


def describe_job(job_id: str, job: Any, started_at: datetime | None) -> CurrentJob:
    """What a job does, from its function and arguments (a job that is gone, or not
    pikku's, is described as such; its arguments are never trusted to be well formed)."""
    current: CurrentJob = {"id": job_id, "kind": None, "description": "a job that is gone",
                           "run_id": None, "step": None, "queue": "",
                           "started_at": started_at}
    if job is None:
        return current
    current["queue"] = str(job.origin or "")
    try:
        func, args = str(job.func_name), list(job.args or ())
    except Exception:  # undecodable data: a forged or foreign job
        current["description"] = "a job whose data does not decode"
        return current
    current["kind"] = job_kind(func)
    first = str(args[0]) if args else ""
    if func == ORCHESTRATE:
        current["description"], current["run_id"] = "orchestrator pass", first
    elif func == WAKE_DUE:
        current["description"] = f"wake-ups due on {first}"
    elif func == RUN_PASSES:
        current["description"] = f"passes of woken runs on {first}"
    elif func == RUN_STEP:
        current["description"], current["run_id"] = "step", first
        current["step"] = str(args[1]) if len(args) > 1 else ""
    elif func == DRAIN_STEPS:
        current["description"], current["run_id"] = "steps of a fan-out", first
    else:
        current["description"] = f"not a pikku_workflows job ({func})"
    return current


class QueueStats(TypedDict):
    """A queue's backlog, read from RQ's queue and registries."""

    name: str
    #: Jobs waiting on the queue (its depth) and when the one at its head was enqueued.
    queued: int
    oldest_enqueued_at: datetime | None
    #: Jobs scheduled for later (sleeps, retry delays, wake-ups) and the next one's time.
    scheduled: int
    next_scheduled_at: datetime | None
    #: Jobs started and not finished (RQ's started registry).
    started: int


def queue_stats(names: list[str]) -> list[QueueStats]:
    """The backlog of each queue in ``names``, in two Redis round trips.

    Raises:
        redis.exceptions.RedisError: Redis cannot be reached.
    """
    from rq.job import Job
    from rq.utils import utcparse

    if not names:
        return []
    redis = connection()
    queues = [get_queue(name) for name in names]
    with redis.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.llen(queue.key)
            pipe.lindex(queue.key, 0)
            pipe.zcard(queue.scheduled_job_registry.key)
            pipe.zrange(queue.scheduled_job_registry.key, 0, 0, withscores=True)
            pipe.zcard(queue.started_job_registry.key)
        replies = pipe.execute()
    rows = [replies[i:i + 5] for i in range(0, len(replies), 5)]
    heads = [_text(row[1]) for row in rows]
    with redis.pipeline(transaction=False) as pipe:
        for head in heads:
            if head is not None:
                pipe.hget(Job.key_for(head), "enqueued_at")
        enqueued = iter(pipe.execute())
    stats: list[QueueStats] = []
    for name, (queued, _, scheduled, first_due, started), head in zip(
            names, rows, heads, strict=True):
        at = _text(next(enqueued)) if head is not None else None
        stats.append({
            "name": name, "queued": int(queued),
            # The head was taken meanwhile (its hash gone): no age to tell.
            "oldest_enqueued_at": utcparse(at) if at else None,
            "scheduled": int(scheduled),
            "next_scheduled_at": datetime.fromtimestamp(first_due[0][1], tz=UTC)
            if first_due else None,
            "started": int(started),
        })
    return stats


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
        try:
            queue = get_queue(queue_name)
            options: dict[str, Any] = {"job_timeout": NO_TIMEOUT, **JOB_TTLS}
            if at is not None and at > timezone.now():
                if claim is not None and _still_scheduled(queue, claim):
                    return
                with queue.connection.pipeline() as pipe:
                    job = queue.enqueue_at(at, func, *args, pipeline=pipe,
                                           meta={DUE_META: at.timestamp()}, **options)
                    # RQ scores scheduled jobs in whole seconds (truncated), which would
                    # move this one up to a second early: the exact time, in the same
                    # transaction, so that no scheduler sees the early score.
                    pipe.zadd(queue.scheduled_job_registry.key, {job.id: at.timestamp()})
                    if claim is not None:
                        pipe.set(claim, job.id, ex=WAKE_CLAIM_TTL)
                    pipe.execute()
            else:
                _enqueue_now(queue, [(func, args)])
        except Exception:
            logger.warning("could not enqueue %s%s on %s; recovery will re-drive it",
                           func.rsplit(".", 1)[-1], tuple(args), queue_name, exc_info=True)
            return
        if on_sent is not None:
            on_sent()

    transaction.on_commit(send)


def _enqueue_now(queue: Any, calls: list[tuple[str, list[Any]]]) -> None:
    """Put jobs (function, arguments) on ``queue`` now, in one Redis round trip
    (``queue.enqueue`` takes two for each)."""
    from rq import Queue

    with queue.connection.pipeline() as pipe:
        queue.enqueue_many([Queue.prepare_data(func, args, timeout=NO_TIMEOUT, **JOB_TTLS)
                            for func, args in calls], pipeline=pipe)
        pipe.execute()


def _send_many(jobs: list[tuple[str, str, list[Any], Callable[[], None] | None]]) -> None:
    by_queue: dict[str, list[Any]] = {}
    for job in jobs:
        by_queue.setdefault(job[0], []).append(job)
    for queue_name, queued in by_queue.items():
        try:
            queue = get_queue(queue_name)
            _enqueue_now(queue, _drained(queue, queued))
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


def _passes_key(queue: str) -> str:
    """The Redis list of the runs of orchestrator queue ``queue`` woken for a pass."""
    return f"pikku:passes:{queue}"


def _passes_claim(queue: str) -> str:
    return f"pikku:passes-job:{queue}"


def _push_pass(queue: str, run_id: RunId) -> None:
    """Give a run in flight its next pass through the queue's list of woken runs, after
    the current transaction commits.

    A woken run (an event, a child's end, a resume...) is an entry of that list, not a
    job of its own: a ``run_passes`` job runs the passes of every entry it finds, so a
    stream of wake-ups costs a few jobs, not one each (RQ's own work per job costs as
    much as a short pass). A job is sent only when none is on its way (the claim key):
    the job deletes that key as it starts, so an entry pushed after that sends a new one.
    Losing the list loses no run: its runs are ``running`` and unleased in the database,
    which the recovery sweep re-drives, as it does for a lost job.
    """
    def send() -> None:
        try:
            redis = connection()
            with redis.pipeline() as pipe:
                pipe.rpush(_passes_key(queue), f"{run_id} {time.time():.6f}")
                pipe.set(_passes_claim(queue), 1, nx=True, ex=PASSES_CLAIM_TTL)
                claimed = pipe.execute()[1]
            if claimed:
                _send_passes_job(queue)
        except Exception:
            logger.warning("could not hand run %s its pass on %s; recovery will re-drive "
                           "it", run_id, queue, exc_info=True)

    transaction.on_commit(send)


def _send_passes_job(queue: str) -> None:
    """Send a ``run_passes`` job (one round trip); if it fails, free the claim."""
    wake = get_queue(wake_queue_name(queue))
    try:
        _enqueue_now(wake, [(RUN_PASSES, [queue])])
    except Exception:
        wake.connection.delete(_passes_claim(queue))
        raise


def run_passes(queue: str, *, job_id: str = "") -> int:
    """Run the passes of the runs woken on orchestrator queue ``queue``, first woken
    first, until none is left or ``PASSES_JOB_SECONDS`` have passed (then a new job goes
    on with the rest). Every worker's job takes entries off the same list, so any number
    of them share a stream of wake-ups. Returns how many passes it ran.

    An entry is a run id and when it was woken; one that does not parse is dropped with a
    warning, and a run that does not exist (deleted since, or a forged id) is passed over.
    """
    redis = connection()
    key = _passes_key(queue)
    # Deleted before the first entry is taken: a run woken from now on sends a job of
    # its own, so none is left in the list with no job on its way.
    redis.delete(_passes_claim(queue))
    ran = 0
    ends = time.monotonic() + PASSES_JOB_SECONDS
    while time.monotonic() < ends:
        entry = redis.lpop(key)
        if entry is None:
            return ran
        run_id, woken_at = _woken(entry)
        if run_id is None:
            logger.warning("passes of %s: dropped an entry that is not a run id: %r", queue,
                           entry[:100])
            continue
        if job_started.receivers:
            send_job_started(kind="pass", queue=wake_queue_name(queue), job_id=job_id,
                             ready_at=woken_at, started_at=timezone.now())
        try:
            drive_queued(run_id)
            ran += 1
        except WorkflowRunNotFoundError:
            logger.warning("pass of run %r, which does not exist: ignored", run_id)
        except Exception:
            logger.exception("the pass of run %s failed; recovery will re-drive it", run_id)
            close_old_connections()  # a connection the failure broke is not reused
    if redis.llen(key) and redis.set(_passes_claim(queue), 1, nx=True, ex=PASSES_CLAIM_TTL):
        _send_passes_job(queue)
    return ran


def _woken(entry: bytes | str) -> tuple[str | None, datetime | None]:
    """An entry of a passes list: the run id (None if it is not one) and when it was
    woken."""
    text = entry.decode(errors="replace") if isinstance(entry, bytes) else entry
    run_id, _, at = text.partition(" ")
    try:
        uuid.UUID(run_id)
        woken_at = datetime.fromtimestamp(float(at), tz=UTC)
    except (ValueError, OverflowError, OSError):  # not ours: a forged or mangled entry
        return None, None
    return run_id, woken_at


def _oldest_woken() -> list[datetime]:
    """When the first entry of each orchestrator queue's passes list was woken."""
    names = orchestrator_queue_names()
    with connection().pipeline(transaction=False) as pipe:
        for name in names:
            pipe.lindex(_passes_key(name), 0)
        heads = pipe.execute()
    return [at for head in heads if head is not None
            for _, at in [_woken(head)] if at is not None]


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
        # in flight: it goes to the list of woken runs, which workers serve first with
        # the wake-ups, so a backlog of new runs never holds it up.
        if new_run is None and at is None:
            _push_pass(queue, run_id)
            return
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
        try:
            stats = queue_stats(all_queue_names())
            woken = _oldest_woken()
        except Exception:
            recovery_logger.warning("could not read the queues' backlog; sweeping as if "
                                    "empty", exc_info=True)
            return None
        heads = [q["oldest_enqueued_at"] for q in stats if q["oldest_enqueued_at"]]
        return min(heads + woken, default=None)
