"""The workflows of tests/unit/test_step_limits.py and tests/faults/test_step_limits.py."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pikku_workflows as pw
from pikku_workflows.engine.clock import clock
from pikku_workflows.models import WorkflowStep

#: When each limited step started, by the engine clock (inline tests).
STARTS: list[object] = []


@pw.function(limits=["test_api"])
def limited_call(data):
    STARTS.append(clock().now())
    return data


@pw.function(limits=["test_api"], queued=True)
def limited_queued_call(data):
    STARTS.append(clock().now())
    return data


@pw.function(limits=["test_rate"])
def rated_call(data):
    STARTS.append(clock().now())
    return data


@pw.workflow
def uses_limited(wf, data):
    return wf.do("Call", "limited_call", data)


@pw.workflow
def uses_limited_queued(wf, data):
    return wf.do("Call", "limited_queued_call", data)


@pw.workflow
def uses_rated(wf, data):
    return wf.do("Call", "rated_call", data)


def _ledger(kind: str, data: dict) -> int:
    """Append this attempt's start and end (wall clock, ns) to the fault test's ledger."""
    started = time.time_ns()
    time.sleep(data.get("hold", 0))
    with open(os.environ.get("PIKKU_LIMITS_LEDGER", "/tmp/pikku_limits_ledger"), "a") as f:
        f.write(f"{kind} {data['n']} {started} {time.time_ns()}\n")
    return int(data["n"])


@pw.function(limits=["fault_api"], queued=True, retries=0)
def fault_limited(data):
    return _ledger("c", data)


@pw.function(limits=["fault_rate"], queued=True, retries=0)
def fault_rated(data):
    return _ledger("r", data)


@pw.workflow
def fault_limit_fan_out(wf, data):
    name = "fault_rated" if data.get("rate") else "fault_limited"
    calls = [(f"Call {n}", name, {"n": n, "hold": data.get("hold", 0)})
             for n in range(data["steps"])]
    return len(wf.parallel(calls))


@pw.function
def plain_noop(data):
    return data


@pw.function(limits=["test_api"])
def limited_noop(data):
    return data


@pw.function(limits=["test_rate"])
def rated_noop(data):
    return data


@pw.workflow
def limited_chain(wf, data):
    """``steps`` steps of the function ``fn`` in a row, then a sleep if ``nap``."""
    for n in range(data["steps"]):
        wf.do(f"Step {n}", data["fn"], n)
    if data.get("nap"):
        wf.sleep("Nap", data["nap"])
    return data["steps"]


@pw.function(limits=["test_api"])
def limited_meets_a_waiter(data):
    """While this attempt holds test_api's slot, a step of another run begins waiting
    for the limit (as a worker's would)."""
    now = clock().now()
    WorkflowStep.objects.create(
        run_id=data["other"], step_name="Waits", rpc_name="limited_call", status="scheduled",
        waiting_for_limit="test_api", waiting_since=now,
        wake_at=now + timedelta(minutes=5))
    STARTS.append(now)
    return 1


@pw.workflow
def chain_meets_a_waiter(wf, data):
    wf.do("First", "limited_meets_a_waiter", data)
    return wf.do("Second", "limited_call", 2)


#: What another worker took while a workflow's own code ran (the tests give it back).
OTHERS: list[object] = []


@pw.workflow
def limited_long_gap(wf, data):
    """A limited step, then the workflow's own code running ``gap`` seconds (past
    LEASE_TIMEOUT), meanwhile another worker takes the limit's slot (``other``) and a
    step of another run begins waiting for it (``waiter``), then another limited step."""
    from pikku_workflows.engine import limits

    wf.do("First", "limited_noop", 1)
    clock().sleep(data["gap"])
    if data.get("other") and not OTHERS:
        OTHERS.append(limits.acquire(("test_api",)))
    if data.get("waiter") and not WorkflowStep.objects.filter(run_id=data["waiter"]).exists():
        now = clock().now()
        WorkflowStep.objects.create(
            run_id=data["waiter"], step_name="Waits", rpc_name="limited_call",
            status="scheduled", waiting_for_limit="test_api", waiting_since=now,
            wake_at=now + timedelta(minutes=5))
    return wf.do("Second", "limited_call", 2)
