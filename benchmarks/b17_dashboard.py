"""B17: the console's dashboard at 1,000 and 1,000,000 runs: answers in under 300 ms."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from benchmarks.surfaces import REPEATS, SIZES, measure, setup

ADMIN = "/admin/pikku_workflows/"
LIMIT_MS = 300.0
DASHBOARDS = ("dashboard, 24 h", "dashboard, 1 h")
#: The page the dashboard is compared with: the runs list (B9's first page).
REFERENCE = "runs list"


def requests() -> dict[str, tuple[str, str]]:
    return {
        "dashboard, 24 h": ("staff", f"{ADMIN}rundashboard/"),
        "dashboard, 1 h": ("staff", f"{ADMIN}rundashboard/?span=1h"),
        REFERENCE: ("staff", f"{ADMIN}workflowrun/"),
    }


def seeded_now() -> datetime:
    """A minute after the newest seeded run: the seed writes its runs every 30 s back from
    the moment it ran, which may be days ago (the 1M database is kept). The dashboard
    reads "now" from the engine's clock, set to this, so its window holds seeded runs."""
    from django.db.models import Max

    from pikku_workflows.models import WorkflowRun

    newest = WorkflowRun.objects.aggregate(newest=Max("created_at"))["newest"]
    assert newest is not None, "no seeded run"
    result: datetime = newest + timedelta(minutes=1)
    return result


def window_facts(now: datetime) -> dict[str, int]:
    """What the 24 h window holds: the work the dashboard's queries do."""
    from pikku_workflows.models import StepAttempt, WorkflowRun

    start = now - timedelta(hours=24)
    return {
        "runs": WorkflowRun.objects.order_by().count(),
        "created": WorkflowRun.objects.filter(created_at__gte=start).count(),
        "finished": WorkflowRun.objects.filter(finished_at__gte=start).count(),
        "attempts": StepAttempt.objects.filter(step__run__finished_at__gte=start).count(),
        "failed attempts": StepAttempt.objects.filter(failed_at__gte=start).count(),
    }


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup(name)  # Django first: the engine's modules need the app registry
    from pikku_workflows.testing import fake_clock

    now = seeded_now()
    with fake_clock(now):
        return {"facts": window_facts(now), "results": measure(requests())}


COLUMNS = ["database", "request", "p50 ms", "p95 ms", "p50 / runs list p50", "queries"]


def main() -> None:
    from benchmarks.harness import Section, Target, bench_args, finish, ratio, run_part

    args = bench_args(__doc__ or "", tuple(SIZES), part)
    if args is None:
        return
    # tiny (a check of the script): the 1,000-run database only.
    sizes = ["1k"] if args.size == "tiny" else list(SIZES)
    section = Section(
        bench="B17", title="the dashboard at a million runs", size=args.size,
        workload=f"B8/B9's seeded databases ({', '.join(sizes)}); the dashboard (24 h and "
        f"1 h) and the runs list, each warmed up, then timed {REPEATS} times through "
        "Django's test client as a superuser (DEBUG off, persistent connections); the "
        "engine's clock set a minute after the newest seeded run", columns=COLUMNS)
    found = {s: run_part("b17_dashboard.py", s, size=args.size, timeout=3600) for s in sizes}
    for size, data in found.items():
        results = data["results"]
        reference = results[REFERENCE]["p50"]
        for name, measured in results.items():
            section.rows.append([size, name, measured["p50"], measured["p95"],
                                 ratio(measured["p50"], reference), measured["queries"]])
        facts = ", ".join(f"{k} {v:,}" for k, v in data["facts"].items())
        section.notes.append(f"{size}: {facts} (the last 24 h of the seed).")
    largest = sizes[-1]
    for name in DASHBOARDS:
        section.targets.append(Target(f"{name}: median at {largest}",
                                      found[largest]["results"][name]["p50"], LIMIT_MS, "ms"))
        if len(sizes) > 1:
            small, large = (found[s]["results"][name] for s in sizes)
            section.notes.append(f"{name}: median at 1M / at 1k "
                                 f"{ratio(large['p50'], small['p50']):.2f}")
            if small["queries"] != large["queries"]:
                section.problems.append(f"{name}: {small['queries']} queries at 1k, "
                                        f"{large['queries']} at 1M")
    if args.size == "tiny":
        section.notes.append("tiny: the 1,000-run database only; `--size full` measures "
                             "the target at 1,000,000 runs.")
    finish(section, args)


if __name__ == "__main__":
    main()
