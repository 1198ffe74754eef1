"""The workflows of tests/unit/test_step_limits.py and tests/faults/test_step_limits.py."""

from __future__ import annotations

import os
import time

import pikku_workflows as pw
from pikku_workflows.engine.clock import clock

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
