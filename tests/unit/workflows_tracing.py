"""The workflows of the tracing tests (tests/unit/test_tracing.py,
tests/integration/test_tracing_on_workers.py)."""

from __future__ import annotations

import pikku_workflows as pw


@pw.function
def tr_fetch(data):
    return {"fetched": data.get("n", 1)}


@pw.function
def tr_ship(data):
    return {"shipped": True}


@pw.workflow
def traced_sleeper(wf, data):
    """A step, a sleep (the pass ends), a step: two passes, the first step replayed."""
    fetched = wf.do("Fetch", tr_fetch, data)
    wf.sleep("Nap", data.get("nap", "1h"))
    return wf.do("Ship", tr_ship, fetched)


@pw.function(retries=1, retry_delay=0)
def tr_flaky(data, ctx):
    if ctx.attempt == 1:
        raise ConnectionError("the first attempt fails")
    return "ok"


@pw.function(retries=1, retry_delay=0)
def tr_broken(data):
    raise ValueError("always broken")


@pw.workflow
def traced_flaky(wf, data):
    return wf.do("Flaky", tr_flaky, data)


@pw.workflow
def traced_broken(wf, data):
    return wf.do("Broken", tr_broken, data)


@pw.workflow
def traced_child(wf, data):
    return wf.do("Child step", tr_fetch, data)


@pw.workflow
def traced_parent(wf, data):
    return wf.do("Child", "traced_child", data)


@pw.workflow
def traced_waiter(wf, data):
    return wf.wait_for_event("Payment", "tr.paid", key=data["key"], timeout="1h")


@pw.function(queued=True, retries=1, retry_delay=0)
def tr_remote(data, ctx):
    if data.get("fail_first") and ctx.attempt == 1:
        raise ConnectionError("the first attempt fails")
    return {"remote": ctx.attempt}


@pw.workflow
def traced_queued(wf, data):
    """A queued step (a step worker's span), a sleep, then the end: three passes on rq."""
    remote = wf.do("Remote", tr_remote, data)
    wf.sleep("Nap", data.get("nap", "1s"))
    return remote


@pw.workflow
def alerted_twin(wf, data):
    """A second failing workflow (alerts are throttled per workflow)."""
    return wf.do("Broken", tr_broken, data)
