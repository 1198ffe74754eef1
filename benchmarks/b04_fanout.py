"""B4: one run fanning out queued steps and joining them; ours vs DBOS queues vs an RQ join."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    check_runs,
    finish,
    ratio,
    run_part,
    setup_script_django,
    wait_for_runs,
    wait_until,
    workers,
)

SIZES: dict[str, dict[str, Any]] = {"tiny": {"widths": [5, 20]}, "full": {"widths": [100, 1000]}}
WARMUP_WIDTH = 10
WORKERS = 2
SCRIPT = "b04_fanout.py"


def run_ours(width: int, *, timeout: float = 600) -> dict[str, Any]:
    """One run of ``bench_fanout``: ``width`` queued no-op steps in ``wf.parallel``, joined.

    Returns:
        ``seconds`` from the start to the run's end, and the correctness ``problems``.
    """
    import pikku_workflows as pw
    from pikku_workflows.models import WorkflowRun

    started = time.time()
    run = pw.start_workflow("bench_fanout", {"width": width}, inline=False)
    seconds = wait_for_runs([run.pk], timeout=timeout, interval=0.01) - started
    problems = check_runs([run.pk], width)
    output = WorkflowRun.objects.get(pk=run.pk).output
    if output != width * (width - 1) // 2:
        problems.append(f"the join returned {output!r}, expected {width * (width - 1) // 2}")
    return {"seconds": seconds, "problems": problems}


def run_plain_rq(width: int, *, timeout: float = 600) -> dict[str, Any]:
    """``width`` no-op jobs and a join job with ``depends_on`` all of them, on plain RQ."""
    from rq.job import Job, JobStatus

    from benchmarks.rq_jobs import JOIN, NOOP, plain_queue, rescue_stranded

    queue = plain_queue()
    started = time.time()
    jobs = [queue.enqueue(NOOP, i, result_ttl=3600) for i in range(width)]
    join = queue.enqueue(JOIN, depends_on=jobs, result_ttl=3600)
    rescued: list[Any] = []

    def joined() -> bool:
        rescued.extend(rescue_stranded(queue))
        return join.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED)

    wait_until(joined, timeout=timeout, interval=0.01, what="the plain RQ join")
    join = Job.fetch(join.id, connection=queue.connection, serializer=queue.serializer)
    seconds = (join.ended_at.timestamp() if join.ended_at else time.time()) - started
    problems = []
    if join.return_value() != width * (width - 1) // 2:
        problems.append(f"the RQ join returned {join.return_value()!r}")
    return {"seconds": seconds, "problems": problems, "rescued": len(rescued)}


def part(name: str, db: str, size: str) -> dict[str, Any]:
    widths = SIZES[size]["widths"]
    results: dict[str, Any] = {}
    if name == "dbos":
        from benchmarks import dbos_peer

        dbos_peer.launch(db)
        try:
            dbos_peer.run_fanout(WARMUP_WIDTH)
            for width in widths:
                results[str(width)] = dbos_peer.run_fanout(width)
        finally:
            dbos_peer.shutdown()
        return results
    setup_script_django(db)
    runner = run_plain_rq if name == "rq" else run_ours
    with workers(WORKERS, plain_rq=name == "rq"):
        runner(WARMUP_WIDTH)
        for width in widths:
            results[str(width)] = runner(width)
    return results


def main() -> None:
    args = bench_args(__doc__ or "", ("ours", "rq", "dbos"), part)
    if args is None:
        return
    widths = SIZES[args.size]["widths"]
    section = Section(
        bench="B4", title="fan-out and join", size=args.size,
        workload=(f"one run of `wf.parallel` over {' and '.join(map(str, widths))} queued "
                  f"no-op steps then a join, on {WORKERS} `pikku_worker` processes; vs DBOS "
                  "(a workflow enqueueing the steps on a DBOS queue at its defaults, then "
                  f"`get_result` on each) and plain RQ ({WORKERS} `SimpleWorker`s, a join job "
                  "with `depends_on=[...]` all of them); PostgreSQL, Redis; after a "
                  f"{WARMUP_WIDTH}-way warm-up on each side"),
        columns=["width", "ours s", "DBOS s", "plain RQ s", "DBOS / ours", "plain RQ / ours"],
    )
    sides = {name: run_part(SCRIPT, name, size=args.size) for name in ("ours", "rq", "dbos")}
    for name, label in (("ours", "ours"), ("rq", "plain RQ"), ("dbos", "DBOS")):
        for width, result in sides[name].items():
            section.problems += [f"{label} {width}-way: {p}" for p in result["problems"]]
    for width in map(str, widths):
        ours, dbos, plain = (sides[n][width]["seconds"] for n in ("ours", "dbos", "rq"))
        section.rows.append([width, ours, dbos, plain, ratio(dbos, ours), ratio(plain, ours)])
        section.targets.append(Target(f"DBOS / ours, {width}-way", ratio(dbos, ours), 5.0,
                                      "x", ">="))
    first = str(widths[0])
    if args.size == "full":
        section.targets.insert(0, Target(f"ours {first}-way", sides["ours"][first]["seconds"],
                                         0.5, "s"))
    rescued = sum(r.get("rescued", 0) for r in sides["rq"].values())
    section.notes.append(
        "DBOS's queue is polled once a second by default (`polling_interval_sec=1.0`), "
        "which bounds its fan-out latency from below.")
    section.notes.append(
        "RQ 3.0 can strand a dependent in the queue's ready registry when two workers "
        "finish its parents at once (a lost WATCH), leaving it for the 10-minute "
        "maintenance pass; the driver runs that recovery on each 10 ms poll so plain RQ is "
        f"measured without the stall ({rescued} enqueued that way here).")
    finish(section, args)


if __name__ == "__main__":
    main()
