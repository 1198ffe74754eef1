"""B3: queued no-op steps on 2 pikku_workers vs the same jobs chained on 2 plain RQ workers."""

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

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"runs": 3, "steps": 3},
    "full": {"runs": 50, "steps": 10},
}
WORKERS = 2
SCRIPT = "b03_queued.py"


def run_ours(runs: int, steps: int, *, timeout: float = 300) -> dict[str, Any]:
    """``runs`` runs of ``steps`` sequential queued no-op steps on the running workers.

    Returns:
        ``seconds`` (start of the first run to the end of the last), ``ms_per_step`` and
        the correctness ``problems`` found.
    """
    import pikku_workflows as pw

    started = time.time()
    run_ids = [pw.start_workflow("bench_queued_steps", {"steps": steps}, inline=False).pk
               for _ in range(runs)]
    seconds = wait_for_runs(run_ids, timeout=timeout) - started
    return {"seconds": seconds, "ms_per_step": seconds / (runs * steps) * 1000,
            "problems": check_runs(run_ids, steps)}


def run_plain_rq(chains: int, length: int, *, timeout: float = 60) -> dict[str, Any]:
    """``chains`` chains of ``length`` no-op jobs (each ``depends_on`` the previous one).

    Needs plain RQ workers on ``rq_jobs.QUEUE``.
    """
    from rq.job import Job, JobStatus

    from benchmarks.rq_jobs import NOOP, plain_queue, rescue_stranded

    queue = plain_queue()
    registry = queue.finished_job_registry
    failed = queue.failed_job_registry
    done_before = registry.count + failed.count
    started = time.time()
    jobs: list[Any] = []
    for _ in range(chains):
        previous = None
        for i in range(length):
            previous = queue.enqueue(NOOP, i, depends_on=previous, result_ttl=3600)
            jobs.append(previous)
    rescued: list[Any] = []

    def done() -> bool:
        rescued.extend(rescue_stranded(queue))
        return registry.count + failed.count >= done_before + len(jobs)

    wait_until(done, timeout=timeout, interval=0.02, what="plain RQ chains finishing")
    fetched = Job.fetch_many([j.id for j in jobs], connection=queue.connection,
                             serializer=queue.serializer)
    ended = [j.ended_at for j in fetched if j is not None and j.ended_at is not None]
    seconds = max(e.timestamp() for e in ended) - started if ended else float("nan")
    problems = []
    not_finished = [j for j in fetched if j is None or j.get_status() != JobStatus.FINISHED]
    if not_finished:
        problems.append(f"{len(not_finished)} of {len(jobs)} plain RQ jobs did not finish")
    return {"seconds": seconds, "ms_per_step": seconds / len(jobs) * 1000,
            "problems": problems, "rescued": len(rescued)}


def part(name: str, db: str, size: str) -> dict[str, Any]:
    sizes = SIZES[size]
    setup_script_django(db)
    # "relay": every queued step goes through Redis to a step job (no eager steps).
    settings = {"EAGER_QUEUED_STEPS": False} if name == "relay" else None
    with workers(WORKERS, plain_rq=name == "rq", pikku_workflows=settings):
        if name == "rq":
            run_plain_rq(2, 2)  # warm-up: imports in the workers
            return run_plain_rq(sizes["runs"], sizes["steps"])
        run_ours(2, 2)
        return run_ours(sizes["runs"], sizes["steps"])


def main() -> None:
    args = bench_args(__doc__ or "", ("ours", "relay", "rq"), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    total = sizes["runs"] * sizes["steps"]
    section = Section(
        bench="B3", title="queued steps, ours vs plain RQ", size=args.size,
        workload=(f"{sizes['runs']} runs x {sizes['steps']} sequential `queued=True` no-op "
                  f"steps on {WORKERS} `pikku_worker` processes, vs the same {total} no-op "
                  f"jobs as {sizes['runs']} `depends_on` chains on {WORKERS} plain RQ "
                  "`SimpleWorker` processes; all started at once, timed to the last finish; "
                  "PostgreSQL, Redis"),
        columns=["side", "total s", "ms per step (wall / steps)", "ours / plain RQ"],
    )
    ours = run_part(SCRIPT, "ours", size=args.size)
    relay = run_part(SCRIPT, "relay", size=args.size)
    plain = run_part(SCRIPT, "rq", size=args.size)
    section.problems += [f"ours: {p}" for p in ours["problems"]]
    section.problems += [f"ours, relay: {p}" for p in relay["problems"]]
    section.problems += [f"plain RQ: {p}" for p in plain["problems"]]
    slowdown = ratio(ours["ms_per_step"], plain["ms_per_step"])
    relayed = ratio(relay["ms_per_step"], plain["ms_per_step"])
    section.rows.append(["pikku_workflows", ours["seconds"], ours["ms_per_step"], slowdown])
    section.rows.append(["pikku_workflows, `EAGER_QUEUED_STEPS=False`", relay["seconds"],
                         relay["ms_per_step"], relayed])
    section.rows.append(["plain RQ", plain["seconds"], plain["ms_per_step"], 1.0])
    section.targets.append(Target("ours / plain RQ time per step", slowdown, 1.5, "x"))
    section.targets.append(Target("ours with `EAGER_QUEUED_STEPS=False` / plain RQ",
                                  relayed, 1.5, "x"))
    section.notes.append(
        "By default a worker serving the step queue runs each sequential queued step it "
        "reaches itself (same step rows, claim, attempt and time limit; no Redis hop), so a "
        "chain costs one job per run. With `EAGER_QUEUED_STEPS=False` every step is a step "
        "job relayed through Redis, and the worker that ran it carries the run on: the "
        "second row, which is what a chain costs when its steps hop between workers "
        "(dedicated step queues on other machines).")
    finish(section, args)


if __name__ == "__main__":
    main()
