"""The workflows of tests/unit/test_recovery.py."""

from __future__ import annotations

import pikku_workflows as pw

CLOSURE_FAILURES = {"left": 1}


@pw.workflow
def closure_fails_once(wf, data):
    def flaky_closure():
        if CLOSURE_FAILURES["left"] > 0:
            CLOSURE_FAILURES["left"] -= 1
            raise RuntimeError("first time")
        return 1

    return wf.do("Closure", flaky_closure, retries=0)


@pw.workflow
def prefixed_gates(wf, data):
    wf.approval("Manager sign-off")
    return wf.approval("Manager")


@pw.function(timeout="200ms", retries=1)
def too_slow_inline(data):
    import time as _time

    _time.sleep(data)  # the behaviour under test: longer than its 200 ms timeout
    return "finished"


@pw.workflow
def inline_timeout(wf, data):
    return wf.do("Slow", "too_slow_inline", data)


@pw.function(queued=True, timeout=1)
def q_quick(data):
    return 1


@pw.function(retries=0)
def slow_in_pass(data):
    import time as _time

    _time.sleep(1.5)  # the behaviour under test: longer than the queued step's 1 s timeout
    return 2


@pw.workflow
def queued_then_slow(wf, data):
    wf.do("Q", "q_quick", None)
    return wf.do("Slow", "slow_in_pass", None)


@pw.function(queued=True, retries=0)
def q_breaks(data):
    raise RuntimeError("broken on purpose")


@pw.workflow
def child_beside_a_breaking_step(wf, data):
    return wf.parallel([("Child", "child_suspends", {}), ("Broken", "q_breaks", None)])
