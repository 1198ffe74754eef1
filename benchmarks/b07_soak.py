"""B7: one worker processing thousands of runs: its memory after warm-up vs at the end."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    check_runs,
    finish,
    rss_mb,
    run_part,
    setup_script_django,
    workers,
)

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"runs": 30, "steps": 3, "budget_s": 60},
    "full": {"runs": 10000, "steps": 3, "budget_s": 240},
}
# Runs started but not finished, at most: enough to keep the worker busy.
WINDOW = 200
SCRIPT = "b07_soak.py"


def run_soak(runs: int, steps: int, worker_pid: int, *, budget_s: float,
             batch: int = 50) -> dict[str, Any]:
    """Feed ``runs`` runs of ``steps`` inline steps to the running worker, sampling its RSS.

    Starting stops early when ``budget_s`` seconds have passed (the table says how many
    runs were processed); the runs already started always finish.

    Returns:
        Runs processed, RSS samples ``(runs done, MB)``, RSS after warm-up (a tenth of
        the runs) and at the end, and the correctness ``problems`` found.
    """
    import pikku_workflows as pw
    from pikku_workflows.models import WorkflowRun
    from pikku_workflows.status import RunStatus

    since = datetime.now(UTC)
    done_runs = WorkflowRun.objects.filter(workflow="bench_steps", created_at__gte=since,
                                           status__in=RunStatus.terminal())
    warmup = max(1, runs // 10)
    deadline = time.monotonic() + budget_s
    started_at = time.monotonic()
    run_ids: list[Any] = []
    samples: list[tuple[int, float]] = []
    warm: tuple[int, float] | None = None
    done = 0
    while True:
        may_start = time.monotonic() < deadline and len(run_ids) < runs
        for _ in range(min(batch, WINDOW - (len(run_ids) - done)) if may_start else 0):
            if len(run_ids) >= runs:
                break
            run_ids.append(pw.start_workflow("bench_steps", {"steps": steps},
                                             inline=False).pk)
        done = done_runs.count()
        samples.append((done, rss_mb(worker_pid)))
        if warm is None and done >= warmup:
            warm = samples[-1]
        if done >= len(run_ids) and not (time.monotonic() < deadline and len(run_ids) < runs):
            break
        if time.monotonic() > deadline + 600:
            break
        time.sleep(0.05 if may_start else 0.25)
    seconds = time.monotonic() - started_at
    end = (done, rss_mb(worker_pid))
    warm = warm or samples[0]
    marks = [samples[min(len(samples) - 1, int(len(samples) * q))] for q in (0.25, 0.5, 0.75)]
    return {
        "runs": len(run_ids), "done": done, "seconds": seconds,
        "runs_per_s": done / seconds if seconds else 0.0,
        "warm": warm, "end": end, "marks": marks,
        "rss_max_mb": max(mb for _, mb in samples),
        "growth_mb": end[1] - warm[1],
        "problems": check_runs(run_ids, steps),
    }


def part(name: str, db: str, size: str) -> dict[str, Any]:
    sizes = SIZES[size]
    setup_script_django(db)
    with workers(1) as pool:
        return run_soak(sizes["runs"], sizes["steps"], pool.procs[0].pid,
                        budget_s=sizes["budget_s"])


def main() -> None:
    args = bench_args(__doc__ or "", ("ours",), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B7", title="worker memory over many runs", size=args.size,
        workload=(f"up to {sizes['runs']} runs of {sizes['steps']} inline no-op steps, each "
                  "run a job on 1 `pikku_worker` (started through RQ, at most "
                  f"{WINDOW} waiting), starting stops after {sizes['budget_s']} s to bound "
                  "the benchmark's time; RSS from /proc/<pid>/status; PostgreSQL, Redis"),
        columns=["runs processed", "runs/s", "RSS after warm-up MB (runs done)",
                 "RSS at 25% / 50% / 75% MB", "RSS at end MB", "RSS max MB", "growth MB"],
    )
    r = run_part(SCRIPT, "ours", size=args.size)
    section.problems += r["problems"]
    section.rows.append([
        r["done"], r["runs_per_s"], f"{r['warm'][1]:.1f} ({r['warm'][0]})",
        " / ".join(f"{mb:.1f}" for _, mb in r["marks"]), r["end"][1], r["rss_max_mb"],
        r["growth_mb"],
    ])
    section.targets.append(Target("worker RSS growth after warm-up", r["growth_mb"], 20.0, "MB"))
    if r["done"] < sizes["runs"]:
        section.notes.append(
            f"Only {r['done']} of {sizes['runs']} runs fit in the {sizes['budget_s']} s "
            f"budget at {r['runs_per_s']:.0f} runs/s; at 10,000 runs this worker would need "
            f"{sizes['runs'] / max(r['runs_per_s'], 1e-9):.0f} s.")
    finish(section, args)


if __name__ == "__main__":
    main()
