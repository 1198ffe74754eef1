"""The workflows of tests/unit/test_custom_executor.py."""

from __future__ import annotations

import pikku_workflows as pw
from tests.testapp.executors import DECLINED_QUEUE
from tests.testapp.shared import record


@pw.function(queued=True, queue=DECLINED_QUEUE, retries=1, retry_delay=0)
def q_declined(data, ctx):
    """A queued step on the queue the test executor declines; fails its first attempt."""
    record("q_declined", data, ctx)
    if ctx.attempt == 1:
        raise ConnectionError("first attempt fails")
    return data + 1


@pw.workflow
def declined_and_taken(wf, data):
    declined = wf.do("Declined", "q_declined", data["n"])
    taken = wf.do("Taken", "q_record", declined)
    wf.sleep("Pause", "1s")
    return {"declined": declined, "taken": taken}
