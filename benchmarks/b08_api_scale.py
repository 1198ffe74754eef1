"""B8: the REST API at 1,000 and 1,000,000 runs (5,000,000 steps): flat cost per request."""

from __future__ import annotations

from urllib.parse import quote

from benchmarks.surfaces import REPEATS, big_run_id, run_scale_bench

API = "/api/workflows/"
LIMITS = {"list": 200.0, "list workflow+status": 200.0, "list as owner": 200.0,
          "detail, 1,000 steps": 300.0, "history, 1,000 steps, a page of 500": 300.0,
          "list input__contains, one run": 300.0,
          "list input__contains, nested, 1 in 1,000": 300.0}


def requests() -> dict[str, tuple[str, str]]:
    big = big_run_id()
    return {
        "list": ("staff", f"{API}runs/"),
        "list workflow+status": ("staff", f"{API}runs/?workflow=bench_wf_3&status=failed"),
        "list as owner": ("owner", f"{API}runs/"),
        "detail, 1,000 steps": ("staff", f"{API}runs/{big}/"),
        # The largest page a client may ask for (history is paginated, 50 by default).
        "history, 1,000 steps, a page of 500": (
            "staff", f"{API}runs/{big}/history/?page_size=500"),
        # JSON containment on the input (the GIN index of migration 0010).
        "list input__contains, one run": (
            "staff", f"{API}runs/?input__contains=" + quote('{"order_id": 777}')),
        "list input__contains, nested, 1 in 1,000": (
            "staff", f"{API}runs/?input__contains="
            + quote('{"customer": {"email": "user7@example.com"}}')),
    }


if __name__ == "__main__":
    run_scale_bench(
        __doc__ or "", "b08_api_scale.py", "B8", "REST API at a million runs",
        "1,000 and 1,000,000 runs (5 steps each) of 20 workflows, 100 or 1,000 runs per owner, "
        "seeded by "
        "INSERT ... SELECT into PostgreSQL, plus one run of 1,000 steps; each request warmed "
        f"up, then timed {REPEATS} times through Django's test client (DEBUG off, persistent "
        "connections), signed in as staff or as an owner",
        requests, LIMITS,
        ("`count` is exact up to 1,000 runs, the planner's estimate above "
         "(pikku_workflows.paging): no request counts a million rows.",))
