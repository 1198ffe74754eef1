"""The DBOS side of the peer comparisons: the same workloads as ours, on DBOS at its defaults."""

from __future__ import annotations

import inspect
import sqlite3
import time
from importlib.metadata import version
from typing import Any

from dbos import DBOS, SetEnqueueOptions

from benchmarks.harness import DATA_DIR, DBOS_DATABASE, POSTGRES_SERVER, ensure_postgres_database

FANOUT_QUEUE = "bench_fanout"


@DBOS.step()
def dbos_noop(value: Any) -> Any:
    """A no-op step."""
    return value


@DBOS.workflow()
def dbos_steps(steps: int) -> int:
    """``steps`` sequential no-op steps."""
    for i in range(steps):
        dbos_noop(i)
    return steps


@DBOS.workflow()
def dbos_fanout(width: int) -> int:
    """Enqueue ``width`` no-op steps on a queue, then wait for all their results."""
    queue = DBOS.retrieve_queue(FANOUT_QUEUE)
    assert queue is not None, "run_fanout registers the queue first"
    handles = [queue.enqueue(dbos_noop, i) for i in range(width)]
    return sum(handle.get_result() for handle in handles)


def launch(db: str) -> None:
    """Start DBOS on a fresh system database of its own, on the same server (or SQLite:
    WAL for ``sqlite``, SQLite's default rollback journal for ``sqlite-rollback``)."""
    if db == "postgres":
        ensure_postgres_database(DBOS_DATABASE, fresh=True)
        url = f"{POSTGRES_SERVER.replace('postgres://', 'postgresql://')}/{DBOS_DATABASE}"
    else:
        DATA_DIR.mkdir(exist_ok=True)
        path = DATA_DIR / ("pikku_bench_dbos_rollback.sqlite3" if db == "sqlite-rollback"
                           else "pikku_bench_dbos.sqlite3")
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        # The journal mode is a property of the file: set it before DBOS opens it, as
        # ours has it (a fresh file has a rollback journal).
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=" + ("DELETE" if db == "sqlite-rollback"
                                                   else "WAL"))
        url = f"sqlite:///{path}"
    # DBOS 3.4 has no admin server any more and ignores the key; it stays for older ones.
    config: Any = {"name": "pikku_bench", "system_database_url": url, "run_admin_server": False}
    DBOS(config=config)
    DBOS.launch()


def shutdown() -> None:
    DBOS.destroy()


def run_steps(runs: int, steps: int, warmup: int = 0) -> dict[str, Any]:
    """``runs`` workflows of ``steps`` no-op steps, one after the other."""
    for _ in range(warmup):
        dbos_steps(steps)
    started = time.perf_counter()
    outputs = [dbos_steps(steps) for _ in range(runs)]
    seconds = time.perf_counter() - started
    problems = [] if outputs == [steps] * runs else ["DBOS returned wrong outputs"]
    return {"seconds": seconds, "steps": runs * steps,
            "ms_per_step": seconds / (runs * steps) * 1000, "problems": problems}


def run_fanout(width: int) -> dict[str, Any]:
    """One workflow fanning out ``width`` queued steps and joining them."""
    DBOS.register_queue(FANOUT_QUEUE)
    started = time.perf_counter()
    total = dbos_fanout(width)
    seconds = time.perf_counter() - started
    want = width * (width - 1) // 2
    problems = [] if total == want else [f"DBOS fan-out summed {total}, expected {want}"]
    return {"seconds": seconds, "problems": problems}


@DBOS.step()
def dbos_stamp() -> float:
    """The moment the step after a ``recv`` runs (epoch seconds)."""
    return time.time()


@DBOS.workflow()
def dbos_receiver(topic: str, timeout: float) -> dict[str, Any]:
    """Wait for one message on ``topic`` (``DBOS.recv``), then record when it came."""
    got = DBOS.recv(topic, timeout_seconds=timeout)
    return {"got": got, "at": dbos_stamp()}


def run_send_recv(runs: int, rate: float, timeout: float) -> dict[str, Any]:
    """``runs`` workflows waiting in ``DBOS.recv``, then one ``DBOS.send`` to each at
    ``rate`` per second; lateness = the step after the ``recv`` ran, minus the moment
    just before its ``send``."""
    handles = [DBOS.start_workflow(dbos_receiver, "paid", timeout) for _ in range(runs)]
    time.sleep(1.0)  # every receiver in its recv
    sent_at: dict[str, float] = {}
    gap = 1.0 / rate
    started = time.perf_counter()
    for i, handle in enumerate(handles):
        pause = started + i * gap - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        workflow_id = handle.get_workflow_id()
        sent_at[workflow_id] = time.time()
        DBOS.send(workflow_id, {"i": i}, "paid")
    lateness, problems = [], []
    for handle in handles:
        result = handle.get_result()
        if result["got"] is None:
            problems.append(f"DBOS workflow {handle.get_workflow_id()} timed out in recv")
            continue
        lateness.append(result["at"] - sent_at[handle.get_workflow_id()])
    return {"lateness": lateness, "problems": problems[:5]}
# --- B15: a partitioned queue (one workflow per key at a time) vs a plain one ------------


@DBOS.step()
def dbos_short(value: Any) -> Any:
    """B15's step: 5 ms of work, as ``bench_short_work``."""
    time.sleep(0.005)
    return value


@DBOS.workflow()
def dbos_keyed(value: Any) -> Any:
    """B15's workflow: two short steps, as ``bench_keyed``."""
    dbos_short(value)
    return dbos_short(value)


def partitioned_queues() -> str | None:
    """None when the installed DBOS has partitioned queues with a per-partition
    concurrency (``register_queue(partition_concurrency=)`` and ``SetEnqueueOptions(
    queue_partition_key=)``), else why not (its version named)."""
    queue_options = inspect.signature(DBOS.register_queue).parameters
    enqueue_options = inspect.signature(SetEnqueueOptions).parameters
    if "partition_concurrency" in queue_options and "queue_partition_key" in enqueue_options:
        return None
    return (f"DBOS {version('dbos')} has no partitioned queue with a per-partition "
            "concurrency (register_queue(partition_concurrency=), "
            "SetEnqueueOptions(queue_partition_key=))")


def run_partitioned(runs: int, keys: int, *, partitioned: bool) -> dict[str, Any]:
    """``runs`` workflows over ``keys`` keys enqueued at once on a queue with
    ``partition_concurrency=1`` (``partitioned``) or on a plain queue; timed to the last
    result. Both poll every 0.1 s (DBOS's default is 1 s)."""
    name = "bench_b15_partitioned" if partitioned else "bench_b15_plain"
    queue = (DBOS.register_queue(name, partition_concurrency=1, polling_interval_sec=0.1)
             if partitioned else DBOS.register_queue(name, polling_interval_sec=0.1))
    started = time.perf_counter()
    handles = []
    for i in range(runs):
        if partitioned:
            with SetEnqueueOptions(queue_partition_key=f"key-{i % keys}"):
                handles.append(queue.enqueue(dbos_keyed, i))
        else:
            handles.append(queue.enqueue(dbos_keyed, i))
    results = [handle.get_result() for handle in handles]
    seconds = time.perf_counter() - started
    problems = [] if results == list(range(runs)) else ["DBOS returned wrong outputs"]
    return {"seconds": seconds, "runs_per_s": runs / seconds if seconds else 0.0,
            "problems": problems}
