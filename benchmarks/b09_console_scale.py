"""B9: the admin console at 1,000 and 1,000,000 runs (5,000,000 steps): flat cost per page."""

from __future__ import annotations

from benchmarks.surfaces import REPEATS, big_run_id, run_scale_bench

ADMIN = "/admin/pikku_workflows/"
LIMITS = {"runs list": 300.0, "failed runs": 300.0, "suspended runs": 300.0,
          "waiting for approval": 300.0, "filtered list": 300.0,
          "run page, 1,000 steps": 500.0, "search by content, one run": 300.0,
          "search by content, nested, 1 in 1,000": 300.0}


def requests() -> dict[str, tuple[str, str]]:
    return {
        "runs list": ("staff", f"{ADMIN}workflowrun/"),
        "failed runs": ("staff", f"{ADMIN}failedrun/"),
        "suspended runs": ("staff", f"{ADMIN}suspendedrun/"),
        "waiting for approval": ("staff", f"{ADMIN}approvalwaitingrun/"),
        "filtered list": ("staff", f"{ADMIN}workflowrun/?status__exact=failed"
                                   "&workflow=bench_wf_3"),
        "run page, 1,000 steps": ("staff", f"{ADMIN}workflowrun/{big_run_id()}/change/"),
        # The search box's key=value syntax: JSON containment, the GIN index of 0010.
        "search by content, one run": ("staff", f"{ADMIN}workflowrun/?q=order_id%3D777"),
        "search by content, nested, 1 in 1,000": (
            "staff", f"{ADMIN}workflowrun/?q=customer.email%3Duser7%40example.com"),
    }


if __name__ == "__main__":
    run_scale_bench(
        __doc__ or "", "b09_console_scale.py", "B9", "admin console at a million runs",
        f"the same seeded databases as B8; each page warmed up, then timed {REPEATS} times "
        "through Django's test client as a superuser (DEBUG off, persistent connections); 100 runs "
        "a page", requests, LIMITS)
