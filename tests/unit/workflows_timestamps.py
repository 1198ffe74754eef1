"""The workflows of tests/unit/test_attempt_timestamps.py."""

from __future__ import annotations

import contextlib

import pikku_workflows as pw
from tests.testapp.shared import record


@pw.function(queued=True, retries=2, retry_delay=0)
def ts_queued_flaky(data, ctx):
    """A queued step failing ``data["fail_times"]`` times, then succeeding."""
    record("ts_queued_flaky", data, ctx)
    if ctx.attempt <= data["fail_times"]:
        raise ConnectionError(f"transient failure on attempt {ctx.attempt}")
    return ctx.attempt


@pw.workflow
def every_kind_of_attempt(wf, data):
    """Attempts of every kind: retried and succeeded, terminally failed with compensation,
    atomic, after a sleep, in parallel, of a child run, and queued (``queued``:
    on the rq executor only)."""
    wf.do("Flaky", "flaky", {"fail_times": 2}, retries=3, retry_delay=0)
    wf.do("Add", "add", {"a": 1, "b": 2})
    with contextlib.suppress(pw.WorkflowStepFailedError):
        wf.do("Declined", "always_fails", {"order": 1}, retries=1, retry_delay=0,
              on_error="refund")
    wf.do("Atomic", "write_ledger_then_crash", {"crash_times": 1}, retries=1, retry_delay=0)
    wf.sleep("Nap", data.get("nap", "1h"))
    wf.parallel([("Left", "echo", 1), ("Right", "flaky", {"fail_times": 1})],
                retries=1, retry_delay=0)
    wf.do("Child", "child_ok", {"n": 2})
    if data.get("queued"):
        wf.do("Queued", "ts_queued_flaky", {"fail_times": 1})
        wf.parallel([("Queued A", "ts_queued_flaky", {"fail_times": 1}),
                     ("Queued B", "ts_queued_flaky", {"fail_times": 0})])
    return "done"
