"""B13: schedules at scale: the cost of one scheduler pass (time, queries per due tick, none
for the schedules not due) and the lateness of ticks with two workers, spread over the
minute and in a burst due at the same second; RQ's cron as the peer when it is there."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    count_queries,
    finish,
    percentile,
    query_kinds,
    run_part,
    setup_script_django,
    workers,
)

SIZES: dict[str, dict[str, Any]] = {
    # spread: schedules every minute, their ticks spread over it; burst: due at one second.
    "tiny": {"spread": 120, "burst": 30, "watch_s": 20},
    "full": {"spread": 10_000, "burst": 1_000, "watch_s": 75},
}
SCRIPT = "b13_schedules.py"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The second of each minute at which the burst's schedules are all due.
BURST_SECOND = 30


def clear_schedules() -> None:
    from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick

    WorkflowScheduleTick.objects.all().delete()
    WorkflowSchedule.objects.all().delete()
    WorkflowRun.objects.all().delete()


def make_schedules(spread: int, burst: int, now: datetime) -> None:
    """``spread`` schedules every minute at evenly spread offsets, and ``burst`` every
    minute at second ``BURST_SECOND``; admin rows (a worker's sync leaves them alone),
    overlap ``allow``: every tick starts its run, whether or not the workers have run
    the previous minute's yet (the lateness measured is the time keeper's)."""
    from pikku_workflows.models import WorkflowSchedule
    from pikku_workflows.runtime.scheduler import cadence_of

    rows = []
    for i in range(spread):
        offset = timedelta(microseconds=round(i * 60_000_000 / spread))
        rows.append(WorkflowSchedule(name=f"bench-spread-{i}", workflow="bench_tick",
                                     every=60.0, start_at=EPOCH + offset, input={"i": i},
                                     overlap="allow", source="admin"))
    for i in range(burst):
        rows.append(WorkflowSchedule(name=f"bench-burst-{i}", workflow="bench_tick",
                                     every=60.0, start_at=EPOCH + timedelta(
                                         seconds=BURST_SECOND), input={"i": i},
                                     overlap="allow", source="admin"))
    for row in rows:
        row.next_fire_at = cadence_of(row).first_from(now)
    WorkflowSchedule.objects.bulk_create(rows, batch_size=2000)


def pass_cost(size: str) -> dict[str, Any]:
    """Scheduler passes at chosen instants, their runs collected (not executed): one
    with nothing due, one second of the spread load, the burst's second."""
    from pikku_workflows.models import WorkflowSchedule
    from pikku_workflows.runtime.scheduler import scheduler_pass

    sizes = SIZES[size]
    clear_schedules()
    minute = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
    make_schedules(sizes["spread"], sizes["burst"], minute - timedelta(microseconds=1))
    handed: list[Any] = []

    def one_pass(at: datetime) -> dict[str, Any]:
        handed.clear()
        started = time.perf_counter()
        ticks, queries = count_queries(lambda: scheduler_pass(now=at, start=handed.append))
        seconds = time.perf_counter() - started
        return {"ticks": len(ticks), "runs": len(handed), "ms": seconds * 1000,
                "queries": len(queries), "kinds": query_kinds(queries)}

    # Nothing due: the pass reads the due schedules only, whatever their number.
    idle = one_pass(minute - timedelta(seconds=0.5))
    # One pass a second, as a busy time keeper makes them, up to the burst's second.
    seconds = [one_pass(minute + timedelta(seconds=second))
               for second in range(BURST_SECOND)]
    burst = one_pass(minute + timedelta(seconds=BURST_SECOND))
    busiest = max(seconds[1:], key=lambda r: r["ticks"])
    return {"schedules": WorkflowSchedule.objects.count(), "idle": idle,
            "spread_second": busiest, "burst": burst,
            "spread_ms_p50": percentile([r["ms"] for r in seconds[1:]], 0.5)}


def lateness(size: str) -> dict[str, Any]:
    """Two ``pikku_worker`` processes (each runs the time keeper) on real time: every
    schedule's ticks for ``watch_s`` seconds; lateness of each tick's run."""
    from django.db.models import Min

    from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowScheduleTick

    sizes = SIZES[size]
    clear_schedules()
    problems: list[str] = []
    with workers(2) as pool:
        time.sleep(2)  # the workers' start-up sync
        now = datetime.now(UTC)
        make_schedules(sizes["spread"], sizes["burst"], now + timedelta(seconds=2))
        window_end = now + timedelta(seconds=2 + sizes["watch_s"])
        burst_at = (now + timedelta(seconds=2)).replace(second=BURST_SECOND, microsecond=0)
        if burst_at < now + timedelta(seconds=2):
            burst_at += timedelta(minutes=1)
        # The window holds at least one burst, whenever the benchmark starts.
        window_end = max(window_end, burst_at + timedelta(seconds=3))
        time.sleep(max(0.0, (window_end - datetime.now(UTC)).total_seconds()) + 5)
        if not WorkflowScheduleTick.objects.exists():
            problems.append("no tick was written: the workers ran no time keeper "
                            + pool.output()[-500:])
    ticks = list(WorkflowScheduleTick.objects.filter(tick_at__lte=window_end).values_list(
        "schedule__name", "tick_at", "status", "run_id", "created_at"))
    created = dict(WorkflowRun.objects.filter(
        pk__in=[t[3] for t in ticks if t[3]]).values_list("pk", "created_at"))
    first_step = dict(StepAttempt.objects.filter(
        step__run_id__in=list(created)).values("step__run_id").annotate(
        at=Min("created_at")).values_list("step__run_id", "at"))
    spread, burst, spread_step, burst_step = [], [], [], []
    seen: set[tuple[str, datetime]] = set()
    for name, tick_at, status, run_id, _ in ticks:
        if (name, tick_at) in seen:
            problems.append(f"tick {name} {tick_at} written twice")
        seen.add((name, tick_at))
        if status != "started" or run_id not in created:
            problems.append(f"tick {name} {tick_at} is {status} without a run")
            continue
        late = (created[run_id] - tick_at).total_seconds()
        (burst if name.startswith("bench-burst") else spread).append(late)
        if run_id in first_step:
            step_late = (first_step[run_id] - tick_at).total_seconds()
            (burst_step if name.startswith("bench-burst") else spread_step).append(step_late)
    if not burst:
        problems.append("no tick of the burst was measured")
    return {
        "ticks": len(ticks), "spread_n": len(spread), "burst_n": len(burst),
        "spread_p50": percentile(spread, 0.5), "spread_p99": percentile(spread, 0.99),
        "burst_p50": percentile(burst, 0.5), "burst_p99": percentile(burst, 0.99),
        "spread_step_p99": percentile(spread_step, 0.99),
        "burst_step_p99": percentile(burst_step, 0.99),
        "problems": problems[:10],
    }


def rq_cron_peer(size: str) -> dict[str, Any]:
    """RQ's cron scheduler (``rq.cron``) with the burst: ``burst`` jobs on the cron
    ``* * * * *``, all due at the next minute; lateness = each job's ``enqueued_at`` (in
    Redis, to be picked up by a worker) minus the minute. Its loop as ``start()`` runs
    it, in this process's main thread."""
    try:
        from rq.cron import CronScheduler
    except ImportError:
        import rq

        return {"available": False, "why": f"rq {rq.__version__} has no rq.cron module"}
    from rq import Queue

    from benchmarks.harness import flush_redis, redis_connection
    from benchmarks.rq_jobs import noop

    flush_redis()
    connection = redis_connection()
    scheduler = CronScheduler(connection=connection, logging_level="WARNING")
    count = SIZES[size]["burst"]
    for i in range(count):
        scheduler.register(noop, "bench-rq-cron", args=(i,), cron="* * * * *",
                           name=f"bench-cron-{i}")
    # Wait for the minute after next if the next is too close to register the jobs in.
    start = datetime.now(UTC)
    due = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    deadline = due + timedelta(seconds=10)
    while datetime.now(UTC) < deadline:
        scheduler.enqueue_jobs()
        pause = min(scheduler.calculate_sleep_interval(), 0.5)
        if pause > 0:
            time.sleep(pause)
    jobs = Queue("bench-rq-cron", connection=connection).get_jobs()
    late = [(job.enqueued_at.replace(tzinfo=UTC) - due).total_seconds() for job in jobs
            if job.enqueued_at is not None]
    late = [value for value in late if value >= 0]  # enqueued at the due minute
    return {"available": True, "why": "", "jobs": len(late), "p50": percentile(late, 0.5),
            "p99": percentile(late, 0.99)}


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup_script_django(db)
    if name == "pass":
        return pass_cost(size)
    if name == "lateness":
        return lateness(size)
    return rq_cron_peer(size)


def main() -> None:
    args = bench_args(__doc__ or "", ("pass", "lateness", "peer"), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B13", title="schedules: scheduler pass cost and tick lateness",
        size=args.size,
        workload=(f"{sizes['spread']} schedules every minute, their ticks spread evenly "
                  f"over it, plus a burst of {sizes['burst']} due at second "
                  f"{BURST_SECOND} of each minute, overlap `allow`; workflow: one inline step. "
                  "Pass cost: "
                  "one `scheduler_pass` at a chosen instant with the runs collected, not "
                  "executed. Lateness: 2 `pikku_worker` processes (each runs the time "
                  f"keeper) for {sizes['watch_s']} s on real time; lateness = the run's "
                  "`created_at` (created and handed to the executor on commit) minus "
                  "`tick_at`; PostgreSQL, Redis"),
        columns=["measure", "due ticks", "pass ms", "queries", "queries per due tick",
                 "p50 s", "p99 s"],
    )
    cost = run_part(SCRIPT, "pass", size=args.size)
    for label, key in (("pass, nothing due", "idle"),
                       ("pass, one second of the spread load (the busiest)", "spread_second"),
                       ("pass, the burst's second", "burst")):
        r = cost[key]
        per_tick = (r["queries"] - cost["idle"]["queries"]) / r["ticks"] if r["ticks"] else 0
        section.rows.append([label, r["ticks"], r["ms"], r["queries"],
                             round(per_tick, 1) if r["ticks"] else "-", "", ""])
    late = run_part(SCRIPT, "lateness", size=args.size, timeout=600)
    section.problems += late["problems"]
    section.rows.append(["lateness, spread (tick -> run created)", late["spread_n"], "", "",
                         "", late["spread_p50"], late["spread_p99"]])
    section.rows.append(["lateness, burst (tick -> run created)", late["burst_n"], "", "",
                         "", late["burst_p50"], late["burst_p99"]])
    section.targets.append(Target("queries of a pass with nothing due (no scan of "
                                  f"{cost['schedules']} schedules)",
                                  cost["idle"]["queries"], 6))
    burst_per_tick = (cost["burst"]["queries"] - cost["idle"]["queries"]) / max(
        cost["burst"]["ticks"], 1)
    spread_per_tick = (cost["spread_second"]["queries"] - cost["idle"]["queries"]) / max(
        cost["spread_second"]["ticks"], 1)
    section.targets.append(Target("queries per due tick, the burst's / the spread's "
                                  "(a burst costs no more per tick)",
                                  burst_per_tick / max(spread_per_tick, 1e-9), 1.0, "x"))
    section.targets.append(Target("tick lateness p99, spread load", late["spread_p99"], 1.0,
                                  "s"))
    section.notes.append(
        f"The burst's p99 (tick -> run created) is {late['burst_p99']:.2f} s; until the "
        f"run's first step is recorded: spread p99 {late['spread_step_p99']:.2f} s, burst "
        f"p99 {late['burst_step_p99']:.2f} s.")
    section.notes.append("Queries of the burst's pass by kind: " + ", ".join(
        f"{k} {v}" for k, v in cost["burst"]["kinds"].items()) + ".")
    peer = run_part(SCRIPT, "peer", size=args.size, timeout=300)
    if peer["available"]:
        section.rows.append(["peer: RQ's cron, the burst (due -> enqueued)", peer["jobs"],
                             "", "", "", peer["p50"], peer["p99"]])
        section.notes.append(
            "RQ's cron (`rq.cron.CronScheduler`, one process, jobs held in its memory, "
            "cron to the minute) enqueues the burst's jobs in Redis; it cannot express the "
            "spread load (ticks at seconds within the minute) and keeps no record of a "
            "tick it did not enqueue (a stopped scheduler's ticks are gone, not missed).")
    else:
        section.notes.append(f"No peer measured: {peer['why']}.")
    section.notes.append(
        "Procrastinate's periodic deferrer is not measured: it needs its own PostgreSQL "
        "schema and async worker, which are not among this project's dependencies.")
    finish(section, args)


if __name__ == "__main__":
    main()
