"""The RQ worker of ``pikku_worker``: non-forking, and it runs only pikku's own jobs."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing import Process
from typing import TYPE_CHECKING, Any

import redis
import rq
from django.db import close_old_connections, connection, connections
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.job import Job
from rq.queue import Queue
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler
from rq.utils import now, utcformat
from rq.worker import SimpleWorker

from .. import mirror
from ..conf import pikku_settings
from ..engine.clock import clock
from ..engine.dispatch import serving
from ..engine.versions import definitions_fingerprint, package_version
from ..runtime.recovery import Sweeper
from ..signals import job_started, send_job_started
from . import rq_internals as internals
from .rq import DEFINITIONS_FIELD, JOB_FUNCTIONS, VERSION_FIELD, job_kind, job_ready_at

logger = logging.getLogger("pikku_workflows.worker")


class RefusedJobError(Exception):
    """A job names a function pikku_worker never runs (a forged or foreign message)."""


class PikkuJob(Job):
    """A job whose function must be one of pikku's job functions."""

    @property
    def func(self) -> Any:
        if self.func_name not in JOB_FUNCTIONS:
            logger.error("refused job %s naming %r: not a pikku_workflows job",
                         self.id, self.func_name)
            raise RefusedJobError(f"job {self.id} names {self.func_name!r}: refused")
        return super().func


# A worker's heartbeat keeps its key alive for worker_ttl + 60 s (8 minutes by default):
# one a second is plenty.
HEARTBEAT_EVERY = 1.0
# How often the scheduler moves due jobs (sleeps, delayed retries) to their queues; RQ's
# interval (whole seconds: its lock TTLs derive from it) would make every wake-up up to a
# second late.
SCHEDULER_POLL = 0.1
# How long RQ's command listener (shutdown, kill-horse) blocks on one read. RQ uses 60 s,
# and its teardown waits for that read to end: a SIGTERM or the end of a burst could take
# a minute, when the reply to its own UNSUBSCRIBE lands before the thread sees the stop.
COMMAND_POLL = 1.0


# A scheduler's lock on a queue lapses this many seconds after its last heartbeat (RQ:
# 61 s), and a scheduler missing a lock tries to take it every ``LOCK_RETRY`` seconds (RQ:
# at worker start, then every 10 minutes). A worker killed while it held the locks leaves
# sleeps and delayed retries unmoved for a few seconds, not for minutes.
LOCK_TTL = 5
LOCK_RETRY = 1.0
# How often a scheduler renews its locks (well within ``LOCK_TTL``); it polls for due
# jobs far more often, and a renewal each poll would be ten Redis scripts a second.
LOCK_RENEW = 1.0


class PreciseScheduledJobRegistry(ScheduledJobRegistry):
    """Due jobs read against the exact time: pikku's jobs are scored in fractional
    seconds, where RQ compares whole seconds."""

    if TYPE_CHECKING:
        # RQ's ScheduledJobRegistry.__init__ is unannotated: BaseRegistry's signature.
        def __init__(self, name: str = "default", connection: redis.Redis | None = None,
                     job_class: type[Job] | None = None, queue: Any = None,
                     serializer: Any = None, death_penalty_class: Any = None) -> None: ...

    def get_jobs_to_schedule(self, timestamp: Any = None, chunk_size: int = 1000) -> list[str]:
        return super().get_jobs_to_schedule(time.time(), chunk_size)  # type: ignore[arg-type]


def _claim(registry: ScheduledJobRegistry, job_ids: list[str]) -> list[str]:
    """Remove these ids from the registry; those this call removed (each id is claimed by
    one caller only, so two schedulers never both enqueue a job)."""
    with registry.connection.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.zrem(registry.key, job_id)
        removed = pipe.execute()
    return [job_id for job_id, gone in zip(job_ids, removed, strict=True) if gone]


class PikkuScheduler(RQScheduler):
    """RQ's scheduler, polling every ``SCHEDULER_POLL`` seconds to the millisecond, with
    short-lived locks that every worker's scheduler keeps trying to take."""

    _locks_tried_at = float("-inf")
    _renewed_at = float("-inf")

    if TYPE_CHECKING:
        # RQScheduler leaves these unannotated; their types, for the calls made here.
        def release_locks(self) -> None: ...
        def stop(self) -> None: ...

    def prepare_registries(self, queue_names: Any = None) -> None:
        super().prepare_registries(queue_names)
        internals.set_scheduled_registries(self, [
            PreciseScheduledJobRegistry(r.name, connection=self.connection,
                                        serializer=self.serializer)
            for r in internals.scheduled_registries(self)])

    @property
    def should_reacquire_locks(self) -> bool:
        return (internals.acquired_locks(self) != internals.queue_names(self)
                and time.monotonic() - self._locks_tried_at >= LOCK_RETRY)

    def acquire_locks(self, auto_start: bool = False) -> set[str]:
        """Take (or keep) the lock of each queue no other scheduler holds; with
        ``auto_start``, start this scheduler's process if it is not running, locks or
        not (it keeps trying)."""
        self._locks_tried_at = time.monotonic()
        held = {name for name in internals.queue_names(self)
                if internals.acquire_or_refresh_lock(self.connection, self.get_locking_key(name),
                                           self.name, LOCK_TTL) != "taken"}
        if held != internals.acquired_locks(self):
            internals.set_scheduled_registries(self, [])
        internals.set_acquired_locks(self, held)
        process = internals.scheduler_process(self)
        if auto_start and (process is None or not process.is_alive()):
            self.start()
        return held

    def heartbeat(self) -> None:
        """Refresh this scheduler's locks for ``LOCK_TTL`` seconds; drop those another
        scheduler took after they lapsed."""
        self._renewed_at = time.monotonic()
        names = sorted(internals.acquired_locks(self))
        refresh = self.connection.register_script(internals.ACQUIRE_OR_REFRESH_LOCK_SCRIPT)
        with self.connection.pipeline() as pipe:
            pipe.hset(self.key, "last_heartbeat", utcformat(now()))
            pipe.expire(self.key, LOCK_TTL + 60)
            for name in names:
                refresh(keys=[self.get_locking_key(name)], args=[self.name, LOCK_TTL],
                        client=pipe)
            outcomes = pipe.execute()[2:]
        lost = {name for name, outcome in zip(names, outcomes, strict=True) if outcome == 0}
        if lost:
            logger.warning("scheduler lock for %s taken over", ", ".join(sorted(lost)))
            internals.set_acquired_locks(self, internals.acquired_locks(self) - lost)
            internals.set_scheduled_registries(self, [])

    def enqueue_scheduled_jobs(self) -> None:
        """Move the due jobs to their queues. Unlike RQ's (read, enqueue, then remove),
        a job is enqueued only by the scheduler whose removal took it from the registry:
        a lock that lapsed under a slow scheduler never makes a job run twice."""
        internals.mark_working(self)
        if not internals.scheduled_registries(self) and internals.acquired_locks(self):
            self.prepare_registries()
        for registry in internals.scheduled_registries(self):
            claimed = _claim(registry, registry.get_jobs_to_schedule())
            if not claimed:
                continue
            queue = Queue(registry.name, connection=self.connection, serializer=self.serializer)
            jobs = [job for job in Job.fetch_many(claimed, connection=self.connection,
                                                  serializer=self.serializer) if job]
            with self.connection.pipeline() as pipe:
                for job in jobs:
                    internals.enqueue_job(queue, job, pipe,
                                          at_front=job.should_enqueue_at_front())
                pipe.execute()

    _parent_pid: int | None = None

    def start(self) -> Process:
        """Fork the scheduler's process, which ends when this (its parent) process does."""
        self._parent_pid = os.getpid()
        process: Process = super().start()  # type: ignore[no-untyped-call]  # RQ: untyped
        return process

    def work(self) -> None:
        # RQ's own loop, polling more often than it renews the locks.
        internals.install_signal_handlers(self)
        if self._parent_pid is not None:
            _die_with_parent()
        self.register_birth()
        while not internals.stop_requested(self):
            if self._parent_pid is not None and os.getppid() != self._parent_pid:
                # The worker died without stopping us (SIGKILL, OOM): no scheduler may
                # outlive it, holding locks and moving jobs for a worker that is gone.
                logger.warning("scheduler: worker %s is gone; stopping", self._parent_pid)
                break
            try:
                if self.should_reacquire_locks:
                    self.acquire_locks()
                if time.monotonic() - self._renewed_at >= LOCK_RENEW:
                    self.heartbeat()
                self.enqueue_scheduled_jobs()
            except redis.RedisError as exc:
                # Redis is down or restarting: keep polling until it answers again.
                logger.warning("scheduler: Redis failed (%s); retrying", exc)
                time.sleep(1)
            time.sleep(SCHEDULER_POLL)
        self.stop()


# prctl(2): a signal for this process when its parent thread ends (Linux).
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to send this process SIGTERM (a graceful stop) when its parent dies.

    Elsewhere (or if prctl is unavailable) the scheduler's loop notices instead, within a
    poll, that its parent changed.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        logger.debug("prctl(PR_SET_PDEATHSIG) unavailable", exc_info=True)


class PikkuWorker(SimpleWorker):
    """A non-forking worker (a fork per job costs ~3x the job) with fresh DB connections."""

    job_class = PikkuJob
    stop_requested = False
    _beat_at = float("-inf")
    _burst = False

    def work(self, burst: bool = False, *args: Any, **kwargs: Any) -> bool:
        self._burst = burst
        return bool(super().work(burst, *args, **kwargs))

    def subscribe(self) -> None:
        """RQ's command channel, read every ``COMMAND_POLL`` seconds; none in burst mode
        (nobody sends commands to a worker that exits when its queues are empty)."""
        if self._burst:
            return
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        # RQ's __init__ sets the attribute to None, which is all mypy infers for it.
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]
            sleep_time=COMMAND_POLL, daemon=True,
            exception_handler=self._pubsub_exception_handler)

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        """RQ's heartbeat, at most every ``HEARTBEAT_EVERY`` seconds and in one round
        trip: RQ sends its three commands one by one, three times per job."""
        if pipeline is not None:
            super().heartbeat(timeout, pipeline)
            return
        beat = time.monotonic()
        if beat - self._beat_at < HEARTBEAT_EVERY:
            return
        self._beat_at = beat
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(timeout, pipe)
            pipe.execute()

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.stop_requested = True
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]  # RQ: untyped

    def _start_scheduler(self, burst: bool = False, logging_level: str | None = "INFO",
                         date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
                         log_format: str = DEFAULT_LOGGING_FORMAT) -> None:
        # RQ's own method, with our scheduler.
        self.scheduler = PikkuScheduler(
            self.queues, connection=self.connection,
            logging_level=logging_level or "INFO", date_format=date_format,
            log_format=log_format, serializer=self.serializer,
        )
        if missing := internals.missing_private_api(self.scheduler):
            # An RQ outside the range pyproject allows: fail at start, not mid-run.
            raise RuntimeError(f"pikku_worker needs rq 3.x; the installed rq {rq.__version__} "
                               f"lacks {', '.join(missing)}")
        if not burst:
            # Every worker runs a scheduler: the one holding a queue's lock moves its due
            # jobs, the others stand by to take over the lock when it lapses.
            self.scheduler.start()
            return
        self.scheduler.acquire_locks()
        if not self.scheduler.acquired_locks:
            return
        try:
            self.scheduler.register_birth()
            self.scheduler.enqueue_scheduled_jobs()
        finally:
            self.scheduler.release_locks()
            self.scheduler.register_death()

    def serialize(self) -> dict[str, Any]:
        """RQ's worker record, plus the code this worker runs (the workers page)."""
        record: dict[str, Any] = super().serialize()
        record[VERSION_FIELD] = package_version()
        record[DEFINITIONS_FIELD] = definitions_fingerprint()
        return record

    def perform_job(self, job: Job, queue: Any, execution: Any) -> bool:
        if job_started.receivers:
            self._report_start(job)
        return bool(super().perform_job(job, queue, execution))

    @staticmethod
    def _report_start(job: Job) -> None:
        """``job_started`` for a pikku job (nothing for a forged or undecodable one, which
        RQ's ``perform_job`` fails on its own)."""
        try:
            kind = job_kind(job.func_name)
        except Exception:
            return
        if kind is not None:
            send_job_started(kind=kind, queue=str(job.origin), job_id=job.id,
                             ready_at=job_ready_at(job), started_at=clock().now())

    def execute_job(self, job: Job, queue: Any) -> None:
        close_old_connections()
        try:
            with serving(self.queue_names()):
                super().execute_job(job, queue)
        finally:
            close_old_connections()


# The longest wait between two pings of a Redis that does not answer.
REDIS_BACKOFF_CAP = 5.0


def work_until_stopped(make_worker: Callable[[], PikkuWorker], *, burst: bool) -> None:
    """Run workers one after another until a stop is requested (SIGTERM, SIGINT).

    RQ's work loop ends when Redis fails under it (a restart, a failover, a timeout);
    here a new worker takes over once Redis answers again, instead of the process
    exiting. Jobs lost with Redis's data are re-driven by the recovery sweep.
    """
    while True:
        worker = make_worker()
        try:
            worker.work(burst=burst, with_scheduler=True, logging_level="WARNING")
        except redis.RedisError as exc:
            # Raised by RQ's teardown, which reports the worker's death to Redis.
            logger.warning("worker %s: Redis failed (%s)", worker.name, exc)
        if burst or worker.stop_requested:
            return
        logger.warning("worker %s stopped without a stop request; restarting once Redis "
                       "answers", worker.name)
        if not _wait_for_redis(worker.connection):
            return


def _wait_for_redis(redis_connection: Any) -> bool:
    """Ping until Redis answers (True) or a stop signal arrives (False)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    delay = 0.5
    try:
        while not stop.wait(delay):
            try:
                redis_connection.ping()
                return True
            except redis.RedisError:
                delay = min(delay * 2, REDIS_BACKOFF_CAP)
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class SweepThread(threading.Thread):
    """Runs the recovery sweep every ``interval`` seconds until stopped, and catches up
    the mirror's outbox."""

    def __init__(self, interval: float) -> None:
        super().__init__(name="pikku-sweeper", daemon=True)
        self.interval = interval
        self.stopped = threading.Event()
        self._mirror_mark: int | None = None

    def run(self) -> None:
        sweeper = Sweeper()
        while not self.stopped.wait(self.interval):
            try:
                sweeper.sweep()
            except Exception:
                logger.exception("recovery sweep failed")
            finally:
                connection.close()
            self.catch_up_mirror()

    def catch_up_mirror(self) -> None:
        """Mirror the outbox entries that were there one tick ago: those the process that
        wrote them did not deliver in time (it died, or the mirror was down)."""
        if pikku_settings.MIRROR is None:
            return
        try:
            if self._mirror_mark is not None:
                mirror.sync(upto=self._mirror_mark)
            self._mirror_mark = mirror.high_water()
        except mirror.MirrorUnavailableError:
            pass  # logged once per outage by the mirror; the entries wait
        except Exception:
            logger.exception("mirror catch-up failed")
        finally:
            connections.close_all()

    def stop(self) -> None:
        self.stopped.set()
