"""B8: the REST API at 1,000 and 1,000,000 runs (5,000,000 steps): flat cost per request."""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Section, bench_args, finish, run_part
from benchmarks.surfaces import COLUMNS, big_run_id, measure, report, setup

SCRIPT = "b08_api_scale.py"
API = "/api/workflows/"
LIMITS = {"list": 200.0, "list workflow+status": 200.0, "list as owner": 200.0,
          "detail, 1,000 steps": 300.0, "history, 1,000 steps": 300.0}


def requests() -> dict[str, tuple[str, str]]:
    big = big_run_id()
    return {
        "list": ("staff", f"{API}runs/"),
        "list workflow+status": ("staff", f"{API}runs/?workflow=bench_wf_3&status=failed"),
        "list as owner": ("owner", f"{API}runs/"),
        "detail, 1,000 steps": ("staff", f"{API}runs/{big}/"),
        "history, 1,000 steps": ("staff", f"{API}runs/{big}/history/"),
    }


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup(name)
    return measure(requests())


def main() -> None:
    args = bench_args(__doc__ or "", ("1k", "1m"), part)
    if args is None:
        return
    section = Section(
        bench="B8", title="REST API at a million runs", size=args.size,
        workload=("1,000 and 1,000,000 runs (5 steps each) of 20 workflows for 1,000 owners "
                  "seeded by INSERT ... SELECT into PostgreSQL, plus one run of 1,000 steps; "
                  "each request warmed up, then timed 30 times through Django's test client "
                  "(DEBUG off, persistent connections), signed in as staff or as an owner"),
        columns=COLUMNS,
    )
    results = {size: run_part(SCRIPT, size, size=args.size, timeout=3600)
               for size in ("1k", "1m")}
    report(section, results, LIMITS, 1.5)
    section.notes.append(
        "`count` is exact up to 10,000 runs, the planner's estimate above "
        "(pikku_workflows.paging): no request counts a million rows.")
    finish(section, args)


if __name__ == "__main__":
    main()
