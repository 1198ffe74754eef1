"""B10: a graph cycle of 10, 100 and 1000 rounds that then leaves by a branch: per-round cost."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    finish,
    ratio,
    run_part,
    setup_script_django,
)

SIZES: dict[str, dict[str, Any]] = {"tiny": {"rounds": [2, 5, 10]},
                                    "full": {"rounds": [10, 100, 1000]}}
SCRIPT = "b10_graph_cycles.py"


def run_rounds(rounds: int) -> dict[str, Any]:
    """Time one inline run of ``bench_cycle`` going ``rounds`` times round its cycle.

    Returns:
        ``ms_per_round`` and the correctness ``problems`` found (status, output, rows).
    """
    import pikku_workflows as pw
    from pikku_workflows.models import WorkflowStep

    started = time.perf_counter()
    run = pw.start_workflow("bench_cycle", {"rounds": rounds}, inline=True)
    seconds = time.perf_counter() - started
    run.refresh_from_db()
    problems = []
    if run.status != "completed" or run.output != {"rounds": rounds}:
        problems.append(f"run {run.pk} is {run.status} with output {run.output!r}")
    spins = WorkflowStep.objects.filter(run=run, step_name__startswith="spin").count()
    if spins != rounds:
        problems.append(f"run {run.pk} has {spins} spin instances, expected {rounds}")
    return {"rounds": rounds, "ms_per_round": seconds / rounds * 1000, "problems": problems}


def run_all_rounds(sizes: list[int]) -> list[dict[str, Any]]:
    import pikku_workflows as pw

    pw.start_workflow("bench_cycle", {"rounds": 3}, inline=True)  # warm-up
    return [run_rounds(n) for n in sizes]


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup_script_django(db)
    return {"rows": run_all_rounds(SIZES[size]["rounds"])}


def main() -> None:
    args = bench_args(__doc__ or "", ("ours",), part)
    if args is None:
        return
    sizes = SIZES[args.size]["rounds"]
    section = Section(
        bench="B10", title="graph cycles: cost per round", size=args.size,
        workload=(f"one inline run of a graph whose node goes round a cycle "
                  f"{', '.join(map(str, sizes))} times (ctx.branch('again')), then leaves "
                  "by its 'done' branch; PostgreSQL"),
        columns=["rounds", "ms/round"],
    )
    rows = run_part(SCRIPT, "ours", size=args.size)["rows"]
    for row in rows:
        section.problems += [f"{row['rounds']} rounds: {p}" for p in row["problems"]]
        section.rows.append([row["rounds"], row["ms_per_round"]])
    first, last = rows[0], rows[-1]
    section.targets.append(Target(
        f"ms/round at {last['rounds']} rounds / ms/round at {first['rounds']} (linear: ~1)",
        ratio(last["ms_per_round"], first["ms_per_round"]), 1.5, "x"))
    section.notes.append(
        "Each round is one planner wave: the planner keeps what it learnt between waves, so "
        "a round costs what it changed, not the run's history (it cost 15 ms at 1,000 "
        "rounds, growing with the run, before the planner became incremental).")
    finish(section, args)


if __name__ == "__main__":
    main()
