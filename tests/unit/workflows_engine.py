"""The workflows of tests/unit/test_engine.py."""

from __future__ import annotations

import pikku_workflows as pw
from tests.testapp.models import Ledger
from tests.testapp.shared import record


@pw.function
def returns_a_set(data):
    record("returns_a_set", data)
    return {1, 2}


@pw.function(atomic=True)
def write_ledger_then_crash(data, ctx):
    """Writes a row, then fails: with atomic=True the row must not survive the attempt."""
    Ledger.objects.create(invocation_id=ctx.invocation_id, note=f"attempt {ctx.attempt}")
    record("write_ledger_then_crash", data, ctx)
    if ctx.attempt <= data["crash_times"]:
        raise RuntimeError("crashed after the write")
    return {"attempt": ctx.attempt}


@pw.workflow
def repeated_names(wf, data):
    return [wf.do("Echo", "echo", i) for i in range(3)]


@pw.workflow
def fan_out_with_failure(wf, data):
    return wf.parallel([
        ("Ok", "echo", 1),
        ("Bad", "always_fails", {"order": 9}),
        ("Also ok", "echo", 3),
    ], retries=0)


@pw.workflow
def bad_result(wf, data):
    return wf.do("Set", "returns_a_set", None, retries=3)


@pw.workflow
def bad_output(wf, data):
    return object()


@pw.workflow
def raises_itself(wf, data):
    wf.do("Ok", "echo", 1)
    raise KeyError("missing-thing")


@pw.workflow
def atomic_step(wf, data):
    return wf.do("Write", "write_ledger_then_crash", {"crash_times": data["crash_times"]})


@pw.workflow
def swallow_signals(wf, data):
    # A body's `except BaseException`-free handler must not swallow control flow.
    try:
        wf.cancel("stop here")
    except Exception:
        return "swallowed"
    return "not reached"


@pw.workflow
def with_state(wf, data):
    wf.set_state("a", 1)
    wf.set_state("b", {"nested": True})
    return wf.get_state()
