"""B9: the admin console at 1,000 and 1,000,000 runs (5,000,000 steps): flat cost per page."""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Section, bench_args, finish, run_part
from benchmarks.surfaces import COLUMNS, big_run_id, measure, report, setup

SCRIPT = "b09_console_scale.py"
ADMIN = "/admin/pikku_workflows/"
LIMITS = {"runs list": 300.0, "failed runs": 300.0, "suspended runs": 300.0,
          "waiting for approval": 300.0, "filtered list": 300.0,
          "run page, 1,000 steps": 500.0}


def requests() -> dict[str, tuple[str, str]]:
    return {
        "runs list": ("staff", f"{ADMIN}workflowrun/"),
        "failed runs": ("staff", f"{ADMIN}failedrun/"),
        "suspended runs": ("staff", f"{ADMIN}suspendedrun/"),
        "waiting for approval": ("staff", f"{ADMIN}approvalwaitingrun/"),
        "filtered list": ("staff", f"{ADMIN}workflowrun/?status__exact=failed"
                                   "&workflow=bench_wf_3"),
        "run page, 1,000 steps": ("staff", f"{ADMIN}workflowrun/{big_run_id()}/change/"),
    }


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup(name)
    return measure(requests())


def main() -> None:
    args = bench_args(__doc__ or "", ("1k", "1m"), part)
    if args is None:
        return
    section = Section(
        bench="B9", title="admin console at a million runs", size=args.size,
        workload=("the same seeded databases as B8; each page warmed up, then timed 30 times "
                  "through Django's test client as a superuser (DEBUG off, persistent "
                  "connections); 100 runs a page"),
        columns=COLUMNS,
    )
    results = {size: run_part(SCRIPT, size, size=args.size, timeout=3600)
               for size in ("1k", "1m")}
    report(section, results, LIMITS, 1.5)
    finish(section, args)


if __name__ == "__main__":
    main()
