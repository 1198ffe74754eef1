"""B2: correctness under load: flaky steps inline and on RQ workers, every result recorded once."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    attempts_of,
    bench_args,
    check_runs,
    finish,
    run_part,
    setup_script_django,
    wait_for_runs,
    workers,
)

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"inline_runs": 4, "inline_steps": 5, "queued_runs": 4, "queued_steps": 4},
    "full": {"inline_runs": 300, "inline_steps": 20, "queued_runs": 200, "queued_steps": 16},
}
WORKERS = 2
SCRIPT = "b02_flaky.py"


def planned_attempts(run_input: dict[str, Any], step_name: str) -> int:
    """The attempts a step takes: its planned failures plus the success."""
    from benchmarks.benchapp.workflows import planned_failures

    return planned_failures(run_input["seed"], step_name) + 1


def _outcome(run_ids: list[Any], steps: int, seconds: float) -> dict[str, Any]:
    step_rows, attempt_rows = attempts_of(run_ids)
    return {
        "runs": len(run_ids), "steps": step_rows, "attempts": attempt_rows,
        "attempts_per_step": attempt_rows / max(step_rows, 1), "seconds": seconds,
        "steps_per_s": step_rows / seconds if seconds else 0.0,
        "problems": check_runs(run_ids, steps, planned_attempts),
    }


def run_inline(runs: int, steps: int) -> dict[str, Any]:
    """``runs`` inline runs of ``steps`` flaky steps (retry_delay 0), checked exactly.

    Returns:
        Counts, attempts per step, steps/s and the correctness ``problems`` found.
    """
    import pikku_workflows as pw

    started = time.perf_counter()
    run_ids = [
        pw.start_workflow("bench_flaky_steps", {"seed": f"i{n}", "steps": steps,
                                                "queued": False}, inline=True).pk
        for n in range(runs)
    ]
    return _outcome(run_ids, steps, time.perf_counter() - started)


def run_queued(runs: int, steps: int, *, timeout: float = 600) -> dict[str, Any]:
    """``runs`` runs of ``steps`` flaky queued steps on the running workers, checked exactly."""
    import pikku_workflows as pw

    started = time.time()
    run_ids = [
        pw.start_workflow("bench_flaky_steps", {"seed": f"q{n}", "steps": steps,
                                                "queued": True}, inline=False).pk
        for n in range(runs)
    ]
    finished = wait_for_runs(run_ids, timeout=timeout, interval=0.1)
    return _outcome(run_ids, steps, finished - started)


def part(name: str, db: str, size: str) -> dict[str, Any]:
    sizes = SIZES[size]
    setup_script_django(db)
    if name == "inline":
        return run_inline(sizes["inline_runs"], sizes["inline_steps"])
    with workers(WORKERS):
        return run_queued(sizes["queued_runs"], sizes["queued_steps"])


def main() -> None:
    args = bench_args(__doc__ or "", ("inline", "queued"), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B2", title="correctness under load (flaky steps)", size=args.size,
        workload=(f"{sizes['inline_runs']} runs x {sizes['inline_steps']} steps inline, and "
                  f"{sizes['queued_runs']} runs x {sizes['queued_steps']} `queued=True` steps "
                  f"on {WORKERS} `pikku_worker` processes; each step fails 0, 1 or 2 times "
                  "(sha256 of run seed and step name, mod 3), retries 2, retry_delay 0; "
                  "PostgreSQL"),
        columns=["mode", "runs", "steps", "attempts", "attempts/step", "steps/s",
                 "all completed, each step recorded once"],
    )
    for mode in ("inline", "queued"):
        result = run_part(SCRIPT, mode, size=args.size)
        section.problems += [f"{mode}: {p}" for p in result["problems"]]
        section.rows.append([
            mode if mode == "inline" else f"RQ, {WORKERS} workers", result["runs"],
            result["steps"], result["attempts"], result["attempts_per_step"],
            result["steps_per_s"], "yes" if not result["problems"] else "NO",
        ])
        section.targets.append(Target(f"{mode}: runs or steps not recorded exactly as planned",
                                      len(result["problems"]), 0))
    section.notes.append(
        "Each step's attempts are checked against the hash's plan exactly (so the "
        "attempts/step ratio is the planned one, about 2.0), every step has one succeeded "
        "attempt, and the attempt rows match the steps' counters.")
    finish(section, args)


if __name__ == "__main__":
    main()
