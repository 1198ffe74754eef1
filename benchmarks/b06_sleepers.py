"""B6: many runs sleeping on one worker: every run wakes, wake lateness, worker memory."""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    children_of,
    finish,
    percentile,
    proc_status,
    run_part,
    setup_script_django,
    wait_for_runs,
    workers,
)

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"runs": 5, "seconds": 1.0},
    "full": {"runs": 2000, "seconds": 5.0},
}
SCRIPT = "b06_sleepers.py"


class MemorySampler(threading.Thread):
    """Samples VmRSS and Threads of a worker (and of its forked children) every ``every`` s."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(name="bench-rss", daemon=True)
        self.pid = pid
        self.every = every
        self.samples: list[dict[str, float]] = []
        self.stopped = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> dict[str, float]:
        own = proc_status(self.pid)
        kids = [proc_status(child) for child in children_of(self.pid)]
        point = {"t": time.monotonic() - self.t0, "rss_mb": own.get("VmRSS", 0) / 1024,
                 "threads": own.get("Threads", 0),
                 "children_rss_mb": sum(k.get("VmRSS", 0) for k in kids) / 1024}
        self.samples.append(point)
        return point

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def check_sleepers(run_ids: list[Any]) -> tuple[list[float], list[str]]:
    """Every run completed with its output, its nap done once and its next step once.

    Returns:
        The wake lateness of each run in seconds (the step after the sleep succeeded
        at, minus the sleep's ``wake_at``), and the problems found.
    """
    from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
    from pikku_workflows.status import RunStatus, StepStatus

    problems: list[str] = []
    runs = dict(WorkflowRun.objects.filter(pk__in=run_ids).values_list("pk", "status"))
    not_done = [pk for pk in run_ids if runs.get(pk) != RunStatus.COMPLETED]
    if not_done:
        problems.append(f"{len(not_done)} of {len(run_ids)} runs did not complete (did not "
                        "wake)")
    naps = dict(WorkflowStep.objects.filter(run_id__in=run_ids, step_name="Nap",
                                            status=StepStatus.SUCCEEDED)
                .values_list("run_id", "wake_at"))
    after: dict[Any, list[Any]] = {}
    for run_id, succeeded_at in StepAttempt.objects.filter(
            step__run_id__in=run_ids, step__step_name="After", status=StepStatus.SUCCEEDED
    ).values_list("step__run_id", "succeeded_at"):
        after.setdefault(run_id, []).append(succeeded_at)
    lateness = []
    for run_id in run_ids:
        if run_id not in naps or naps[run_id] is None:
            problems.append(f"run {run_id}: its sleep did not succeed with a wake_at")
        elif len(after.get(run_id, [])) != 1:
            problems.append(f"run {run_id}: the step after the sleep succeeded "
                            f"{len(after.get(run_id, []))} times")
        else:
            lateness.append((after[run_id][0] - naps[run_id]).total_seconds())
        if len(problems) > 5:
            break
    return lateness, problems


def run_sleepers(runs: int, seconds: float, worker_pid: int, *,
                 timeout: float = 900) -> dict[str, Any]:
    """Start ``runs`` runs sleeping ``seconds`` on the running worker; wait for all.

    Returns:
        Lateness percentiles, worker memory and thread samples, whether a sleeping run
        held the worker (it did not if all finished far sooner than ``runs * seconds``),
        and the correctness ``problems`` found.
    """
    import pikku_workflows as pw

    sampler = MemorySampler(worker_pid)
    idle = sampler.sample()
    sampler.start()
    started = time.time()
    try:
        run_ids = [pw.start_workflow("bench_sleeper", {"seconds": seconds, "i": i},
                                     inline=False).pk for i in range(runs)]
        started_all = time.time() - started
        at_started = sampler.sample()
        finished = wait_for_runs(run_ids, timeout=timeout, interval=0.5)
    finally:
        sampler.stop()
    end = sampler.sample()
    lateness, problems = check_sleepers(run_ids)
    return {
        "runs": runs, "sleep_s": seconds, "start_s": started_all,
        "total_s": finished - started,
        "woke": len(lateness), "p50": percentile(lateness, 0.5),
        "p99": percentile(lateness, 0.99), "max": max(lateness, default=float("nan")),
        "rss_idle_mb": idle["rss_mb"], "rss_started_mb": at_started["rss_mb"],
        "rss_end_mb": end["rss_mb"],
        "rss_max_mb": max(s["rss_mb"] for s in sampler.samples),
        "threads_max": max(s["threads"] for s in sampler.samples),
        "threads_idle": idle["threads"],
        "scheduler_rss_mb": end["children_rss_mb"],
        "timeline": [(round(s["t"]), round(s["rss_mb"], 1))
                     for s in sampler.samples[::max(1, len(sampler.samples) // 10)]],
        "problems": problems,
    }


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup_script_django(db)
    with workers(1) as pool:
        return run_sleepers(SIZES[size]["runs"], SIZES[size]["seconds"], pool.procs[0].pid)


def main() -> None:
    args = bench_args(__doc__ or "", ("ours",), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B6", title="sleeping runs on one worker", size=args.size,
        workload=(f"{sizes['runs']} runs each `wf.sleep` {sizes['seconds']:g} s then one "
                  "inline step, started back to back on 1 `pikku_worker` (RQ scheduler and "
                  "5 s recovery sweeps); lateness = the next step's success minus the "
                  "sleep's `wake_at`; PostgreSQL, Redis"),
        columns=["runs", "woke", "start all s", "all done s", "lateness p50 s",
                 "lateness p99 s", "lateness max s", "worker RSS idle / started / max / end MB",
                 "worker threads idle / max"],
    )
    r = run_part(SCRIPT, "ours", size=args.size)
    section.problems += r["problems"]
    section.rows.append([
        r["runs"], r["woke"], r["start_s"], r["total_s"], r["p50"], r["p99"], r["max"],
        f"{r['rss_idle_mb']:.0f} / {r['rss_started_mb']:.0f} / {r['rss_max_mb']:.0f} / "
        f"{r['rss_end_mb']:.0f}", f"{r['threads_idle']} / {r['threads_max']}",
    ])
    section.targets.append(Target("runs that did not wake", r["runs"] - r["woke"], 0))
    section.targets.append(Target("wake lateness p99", r["p99"], 1.0, "s"))
    section.targets.append(Target("worker RSS growth, started -> end",
                                  r["rss_end_mb"] - r["rss_started_mb"], 20.0, "MB"))
    held = r["runs"] * r["sleep_s"]
    section.notes.append(
        f"No slot is held while sleeping: {r['runs']} sleeps of {r['sleep_s']:g} s finished "
        f"in {r['total_s']:.0f} s on one single-job worker (holding a slot each would take "
        f"{held:.0f} s), and its thread count stayed at {r['threads_max']} at most.")
    section.notes.append("Worker RSS over time (s: MB): " + ", ".join(
        f"{t}: {mb}" for t, mb in r["timeline"]) + ".")
    section.notes.append(
        f"The worker's forked RQ scheduler process used {r['scheduler_rss_mb']:.0f} MB RSS at "
        "the end (not included above).")
    finish(section, args)


if __name__ == "__main__":
    main()
