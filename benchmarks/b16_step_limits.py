"""B16: the cost a named step limit adds to a step: inline runs of no-op steps holding a
concurrency limit, a rate limit, or none, interleaved in one process on PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import Section, Target, bench_args, finish, run_part, setup_script_django

SIZES: dict[str, dict[str, int]] = {"tiny": {"runs": 6, "steps": 20, "warmup": 2},
                                    "full": {"runs": 60, "steps": 20, "warmup": 5}}
SCRIPT = "b16_step_limits.py"
#: The side of each row: the step function its runs call.
KINDS = {"none": "bench_noop", "concurrency": "bench_limited_noop",
         "rate": "bench_rated_noop"}
#: DESIGN's target: what a limit adds to a step, in ms.
LIMIT_MS = 0.2


def _run(fn: str, steps: int) -> float:
    """One inline run: its seconds."""
    import pikku_workflows as pw

    started = time.perf_counter()
    run = pw.start_workflow("bench_limited_steps", {"steps": steps, "fn": fn}, inline=True)
    seconds = time.perf_counter() - started
    if run.status != "completed" or run.output != steps:
        raise RuntimeError(f"run of {fn} ended {run.status}: {run.error}")
    return seconds


def _statements(fn: str, steps: int) -> int:
    """The statements of one more run (counted apart: while Django logs queries, the
    engine prepares none of its statements, which would slow every side)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        _run(fn, steps)
    return len(queries.captured_queries)


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup_script_django(db)
    from django.db import connection

    sizes = SIZES[size]
    steps = sizes["steps"]
    for _ in range(sizes["warmup"]):
        for fn in KINDS.values():
            _run(fn, steps)
    # Interleaved, so that each side meets the same load of the shared machine; the
    # median run of each side.
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(sizes["runs"]):
        for kind, fn in KINDS.items():
            times[kind].append(_run(fn, steps))
    statements = {kind: _statements(fn, steps) for kind, fn in KINDS.items()}
    per_step = {kind: sorted(values)[len(values) // 2] / steps * 1000
                for kind, values in times.items()}
    return {"vendor": connection.vendor, "steps": steps, "runs": sizes["runs"],
            "ms_per_step": per_step,
            "statements_per_step": {k: v / steps for k, v in statements.items()},
            "problems": []}


def main() -> None:
    args = bench_args(__doc__ or "", ("ours",), part)
    if args is None:
        return
    result = run_part(SCRIPT, "ours", size=args.size)
    steps, runs = result["steps"], result["runs"]
    section = Section(
        bench="B16", title="the cost of a step limit", size=args.size,
        workload=(f"{runs} inline runs of {steps} no-op steps for each side (no limit, a "
                  "concurrency limit of 1000, a rate of 1,000,000/min: never full), "
                  "interleaved in one process; median run; PostgreSQL"),
        columns=["steps hold", "ms/step", "added ms/step", "statements/step"],
        problems=list(result["problems"]),
    )
    base = result["ms_per_step"]["none"]
    for kind in KINDS:
        ms = result["ms_per_step"][kind]
        section.rows.append([kind, ms, ms - base, result["statements_per_step"][kind]])
    for kind in ("concurrency", "rate"):
        section.targets.append(Target(f"a {kind} limit adds to a step",
                                      result["ms_per_step"][kind] - base, LIMIT_MS, "ms"))
    section.notes.append(
        "A new in-pass step naming one limit takes its slot in the statement that starts "
        "it (the checkpoint); an ended attempt's concurrency slot is handed to the next "
        "step of the limit in that statement, or given back (with the wake-up of the "
        "first waiting step) at the pass's next write: one statement per run. A rate's "
        "slot is spent; when all of a rate's rows are taken within its period, the start "
        "makes more rows apart (a few statements every 32 starts). The statements column "
        "counts every statement of a run per step (the run's own start and end "
        "included).")
    finish(section, args)


if __name__ == "__main__":
    main()
