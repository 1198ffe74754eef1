"""B5: one run of 10, 100 and 1000 sequential inline steps: per-step time and queries per step."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    check_runs,
    count_queries,
    finish,
    query_kinds,
    ratio,
    run_part,
    setup_script_django,
)

SIZES: dict[str, dict[str, Any]] = {"tiny": {"lengths": [2, 5, 10], "budget": 10},
         "full": {"lengths": [10, 100, 1000], "budget": 1000}}
SCRIPT = "b05_long_runs.py"


def run_length(steps: int, repeats: int = 1) -> dict[str, Any]:
    """Time ``repeats`` inline runs of ``steps`` steps, then count one more run's queries.

    Queries are counted on a separate run (capturing them slows the run down).

    Returns:
        ``ms_per_step``, ``queries`` of one run, ``queries_per_step``, the queries by
        kind per step, and the correctness ``problems`` found.
    """
    import pikku_workflows as pw

    started = time.perf_counter()
    run_ids = [pw.start_workflow("bench_steps", {"steps": steps}, inline=True).pk
               for _ in range(repeats)]
    seconds = time.perf_counter() - started
    counted, queries = count_queries(
        lambda: pw.start_workflow("bench_steps", {"steps": steps}, inline=True))
    run_ids.append(counted.pk)
    kinds = {k: v / steps for k, v in query_kinds(queries).items()}
    return {"steps": steps, "ms_per_step": seconds / (steps * repeats) * 1000,
            "queries": len(queries), "queries_per_step": len(queries) / steps,
            "kinds_per_step": kinds, "problems": check_runs(run_ids, steps)}


def run_lengths(lengths: list[int], budget: int) -> list[dict[str, Any]]:
    """Each length, repeated so that every length runs about ``budget`` steps in all."""
    import pikku_workflows as pw

    pw.start_workflow("bench_steps", {"steps": lengths[0]}, inline=True)  # warm-up
    return [run_length(n, max(1, budget // n)) for n in lengths]


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup_script_django(db)
    return {"lengths": run_lengths(SIZES[size]["lengths"], SIZES[size]["budget"])}


def main() -> None:
    args = bench_args(__doc__ or "", ("ours",), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B5", title="long runs: per-step cost and queries", size=args.size,
        workload=(f"one inline run of {', '.join(map(str, sizes['lengths']))} sequential "
                  f"no-op steps, repeated so that each length runs about {sizes['budget']} "
                  "steps; queries counted on one more run of each (CaptureQueriesContext); "
                  "PostgreSQL"),
        columns=["steps per run", "ms/step", "queries per run", "queries/step",
                 "marginal queries/step", "queries per step by kind"],
    )
    result = run_part(SCRIPT, "ours", size=args.size)["lengths"]
    previous: dict[str, Any] | None = None
    marginals = []
    for row in result:
        section.problems += [f"{row['steps']} steps: {p}" for p in row["problems"]]
        marginal: Any = "-"
        if previous is not None:
            marginal = (row["queries"] - previous["queries"]) / (row["steps"] - previous["steps"])
            marginals.append(marginal)
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in row["kinds_per_step"].items())
        section.rows.append([row["steps"], row["ms_per_step"], row["queries"],
                             row["queries_per_step"], marginal, kinds])
        previous = row
    first, last = result[0], result[-1]
    section.targets.append(Target(
        f"ms/step at {last['steps']} steps / ms/step at {first['steps']}",
        ratio(last["ms_per_step"], first["ms_per_step"]), 1.3, "x"))
    if marginals:
        section.targets.append(Target(
            "marginal queries/step, largest / smallest (1.00 = constant)",
            ratio(max(marginals), min(marginals)), 1.0, "x"))
    section.notes.append(
        "Marginal queries/step is (queries(n) - queries(previous n)) / (n - previous n): "
        "the per-step cost without the per-run overhead (start, lease, finish).")
    finish(section, args)


if __name__ == "__main__":
    main()
