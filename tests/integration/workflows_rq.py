"""The workflows of tests/integration/test_rq_executor.py and
test_rq_operations.py: queued steps, run by ``pikku_worker`` subprocesses (which import
this module through tests/testapp/workflows.py)."""

from __future__ import annotations

import pikku_workflows as pw
from tests.testapp.models import Ledger


@pw.workflow
def queued_fan_out(wf, data):
    return wf.parallel([(f"Item {i}", "q_record", i) for i in range(data["n"])])


@pw.function(queued=True, retries=2, retry_delay=0)
def q_slow_charge(data, ctx):
    """Charges once per invocation id, then is slow on its first attempt (to be killed)."""
    import time as _time

    Ledger.objects.get_or_create(invocation_id=ctx.invocation_id, defaults={"note": "charged"})
    if ctx.attempt == 1:
        # The behaviour under test: a step still running when its worker is killed.
        _time.sleep(data.get("first_attempt_seconds", 30))
    return {"charged": True, "attempt": ctx.attempt}


@pw.workflow
def slow_charge(wf, data):
    return wf.do("Charge", "q_slow_charge", data)


@pw.function(queued=True, retries=2, retry_delay="200ms")
def q_flaky(data, ctx):
    if ctx.attempt <= data["fail_times"]:
        raise ConnectionError(f"flaky attempt {ctx.attempt}")
    return ctx.attempt


@pw.workflow
def queued_retry(wf, data):
    return wf.do("Flaky", "q_flaky", {"fail_times": data["fail_times"]})


@pw.function(queued=True, retries=0, timeout=1)
def q_too_slow(data):
    import time as _time

    _time.sleep(5)  # the behaviour under test: longer than its 1 s timeout
    return "never"


@pw.workflow
def queued_timeout(wf, data):
    return wf.do("Slow", "q_too_slow", None)


@pw.function(queued=True, queue="pikku-test-dedicated-steps")
def q_isolated(data):
    return {"isolated": data}


@pw.workflow(queue="pikku-test-dedicated-runs")
def isolated(wf, data):
    return wf.do("Isolated", "q_isolated", data)


@pw.function(queued=True, retries=1, retry_delay=0)
def q_fails(data):
    raise ValueError(f"queued node failed for {data}")


@pw.function(queued=True)
def q_total(data):
    return sum(data["values"])


@pw.function(queued=True)
def q_double_n(data):
    return data["n"] * 2


pw.graph_workflow(
    "queued_diamond",
    nodes={"a": "echo", "b": "q_double_n", "c": "q_double_n", "join": "q_total"},
    config={
        "a": {"next": ["b", "c"]},
        "b": {"input": {"n": pw.ref("a", "n")}, "next": "join"},
        "c": {"input": {"n": pw.ref("a", "m")}, "next": "join"},
        "join": {"input": {"values": [pw.ref("b"), pw.ref("c")]}},
    },
    output="join",
)


pw.graph_workflow(
    "queued_sequential",
    nodes={"square": "q_square", "sum": "q_total"},
    config={
        "square": {"for_each": pw.ref("trigger", "values"), "mode": "sequential",
                   "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
    output="sum",
)


pw.graph_workflow(
    "queued_on_error",
    nodes={"charge": "q_fails", "cleanup": "refund"},
    config={"charge": {"on_error": "cleanup"}},
    entry="charge",
)


@pw.workflow
def flaky_fan_out(wf, data):
    """Queued steps in parallel, each failing ``fail_times`` times first."""
    return wf.parallel([(f"Item {i}", "q_flaky", {"fail_times": data["fail_times"]})
                        for i in range(data["n"])])


@pw.workflow
def inline_retry_after_a_delay(wf, data):
    """An in-pass step that fails once, then waits ``delay`` before its retry."""
    return wf.do("Flaky", "flaky", {"fail_times": 1}, retries=1, retry_delay=data["delay"])


queued_graph_retry_after_delay = pw.graph_workflow(
    "queued_graph_retry_after_delay",
    nodes={"charge": "q_flaky", "receipt": "echo"},
    config={"charge": {"retries": 3, "retry_delay": "300ms", "next": "receipt"},
            "receipt": {"input": {"charged": pw.ref("charge")}}},
    output="receipt",
)
