"""B15: workflow concurrency: runs with ``Concurrency(max=1, key=...)`` over many keys vs
the same runs unlimited, on two pikku_workers (throughput), and the per-key invariant
checked from the runs' step times."""

from __future__ import annotations

import time
from itertools import pairwise
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    finish,
    ratio,
    run_part,
    setup_script_django,
    wait_for_runs,
    workers,
)

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"runs": 60, "keys": 20},
    "full": {"runs": 1000, "keys": 100},
}
WORKERS = 2
SCRIPT = "b15_concurrency.py"


def overlaps(run_ids: list[Any]) -> list[str]:
    """Runs of one key whose lives (first step start to last step end) overlap."""
    from django.db.models import Max, Min

    from pikku_workflows.models import WorkflowRun

    lives = (WorkflowRun.objects.filter(pk__in=run_ids)
             .annotate(began=Min("steps__created_at"), ended=Max("steps__updated_at"))
             .values_list("concurrency_key", "began", "ended", "pk"))
    by_key: dict[str, list[tuple[Any, Any, Any]]] = {}
    for key, began, ended, pk in lives:
        by_key.setdefault(key or "", []).append((began, ended, pk))
    problems = []
    for key, spans in by_key.items():
        spans.sort()
        for (_, ended, before), (began, _, after) in pairwise(spans):
            if began < ended:
                problems.append(f"key {key}: run {after} began before run {before} ended")
    return problems[:10]


def run_side(workflow: str, runs: int, keys: int) -> dict[str, Any]:
    """``runs`` runs of ``workflow`` over ``keys`` keys, all started at once."""
    import pikku_workflows as pw
    from pikku_workflows.models import WorkflowRun

    started = time.time()
    run_ids = [pw.start_workflow(workflow, {"k": f"key-{i % keys}"}, inline=False).pk
               for i in range(runs)]
    seconds = wait_for_runs(run_ids, timeout=900) - started
    problems = []
    not_completed = WorkflowRun.objects.filter(pk__in=run_ids).exclude(status="completed")
    if not_completed.exists():
        problems.append(f"{not_completed.count()} of {runs} runs did not complete")
    if workflow == "bench_keyed":
        problems += overlaps(run_ids)
    return {"seconds": seconds, "runs_per_s": runs / seconds if seconds else 0.0,
            "problems": problems}


def dbos_side(size: str, partitioned: bool) -> dict[str, Any]:
    """The same runs on DBOS (one process, its own executor), if it is installed."""
    try:
        from benchmarks import dbos_peer
    except ImportError:
        return {"available": False}
    missing = dbos_peer.partitioned_queues()
    if missing is not None:
        return {"available": False, "reason": missing}
    sizes = SIZES[size]
    dbos_peer.launch("postgres")
    try:
        dbos_peer.run_partitioned(4, 2, partitioned=partitioned)  # warm-up
        return {"available": True, **dbos_peer.run_partitioned(
            sizes["runs"], sizes["keys"], partitioned=partitioned)}
    finally:
        dbos_peer.shutdown()


def part(name: str, db: str, size: str) -> dict[str, Any]:
    if name.startswith("dbos"):
        return dbos_side(size, partitioned=name == "dbos_partitioned")
    sizes = SIZES[size]
    setup_script_django(db)
    workflow = "bench_keyed" if name == "limited" else "bench_unkeyed"
    with workers(WORKERS):
        run_side(workflow, 4, 2)  # warm-up: imports in the workers
        return run_side(workflow, sizes["runs"], sizes["keys"])


def main() -> None:
    args = bench_args(__doc__ or "", ("limited", "unlimited", "dbos_partitioned",
                                      "dbos_plain"), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B15", title="workflow concurrency: max=1 per key vs unlimited",
        size=args.size,
        workload=(f"{sizes['runs']} runs of two 5 ms inline steps over {sizes['keys']} "
                  f"keys with `Concurrency(max=1, key=\"k\")`, vs the same runs without "
                  f"a limit; {WORKERS} `pikku_worker` processes; all started at once, "
                  "timed to the last finish; PostgreSQL, Redis"),
        columns=["side", "total s", "runs/s", "limited / unlimited"],
    )
    limited = run_part(SCRIPT, "limited", size=args.size, timeout=1200)
    unlimited = run_part(SCRIPT, "unlimited", size=args.size, timeout=1200)
    section.problems += [f"limited: {p}" for p in limited["problems"]]
    section.problems += [f"unlimited: {p}" for p in unlimited["problems"]]
    share = ratio(limited["runs_per_s"], unlimited["runs_per_s"])
    section.rows.append(["max=1 per key", limited["seconds"], limited["runs_per_s"], share])
    section.rows.append(["unlimited", unlimited["seconds"], unlimited["runs_per_s"], 1.0])
    section.targets.append(Target("limited / unlimited throughput", share * 100, 80, "%",
                                  op=">="))
    partitioned = run_part(SCRIPT, "dbos_partitioned", size=args.size, timeout=1200)
    if partitioned.get("available"):
        plain = run_part(SCRIPT, "dbos_plain", size=args.size, timeout=1200)
        section.problems += [f"DBOS: {p}" for p in partitioned["problems"] + plain["problems"]]
        dbos_share = ratio(partitioned["runs_per_s"], plain["runs_per_s"])
        section.rows.append(["DBOS partitioned queue (partition_concurrency=1)",
                             partitioned["seconds"], partitioned["runs_per_s"], dbos_share])
        section.rows.append(["DBOS plain queue", plain["seconds"], plain["runs_per_s"], 1.0])
        section.notes.append(
            "DBOS runs in one process with its own executor (queues polled every 0.1 s); "
            "its ratio compares its partitioned queue with its plain one.")
    else:
        section.notes.append(
            f"No DBOS peer: {partitioned['reason']}." if partitioned.get("reason") else
            "DBOS is not installed (`make bench` installs it): no peer.")
    section.notes.append(
        "A key's runs form a chain (each starts after the previous one's end, through the "
        "queue): with few runs in flight per worker (the tiny size: 20 keys on 2 workers) "
        "the chains, not the workers, bound the limited side's time.")
    finish(section, args)


if __name__ == "__main__":
    main()
