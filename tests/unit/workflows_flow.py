"""The workflows of the flow-control tests (tests/unit/test_flow_control.py, the API tests
of start/'s ``run_timeout`` and ``debounce``, and tests/faults/test_concurrency_kills.py)."""

from __future__ import annotations

import pikku_workflows as pw
from pikku_workflows.engine.clock import clock
from tests.testapp.shared import CALLS


@pw.function
def flow_note(data):
    CALLS.setdefault("flow_note", []).append(data)
    return data


@pw.workflow(concurrency=pw.Concurrency(max=1, key="customer"))
def flow_per_customer(wf, data):
    """One run per customer at a time; each waits (suspended) until resumed."""
    wf.do("Begin", flow_note, {"begin": data["n"]})
    wf.suspend("hold")
    return wf.do("End", flow_note, {"end": data["n"]})


@pw.workflow(concurrency=pw.Concurrency(max=1, key="customer"))
def flow_approves(wf, data):
    """One run per customer at a time; each waits for its sign-off."""
    return wf.approval("Sign-off")


@pw.workflow(concurrency=pw.Concurrency(max=2))
def flow_two_slots(wf, data):
    """Two runs at a time, all keys one; each waits until resumed."""
    wf.suspend("hold")
    return data


@pw.workflow(concurrency=pw.Concurrency(max=1, key="k", on_full="skip"))
def flow_skips(wf, data):
    wf.suspend("hold")
    return data


@pw.workflow(concurrency=pw.Concurrency(max=1, key=lambda data: data["k"].upper(),
                                        on_full="cancel_running"))
def flow_replaces(wf, data):
    wf.suspend("hold")
    return data


@pw.workflow(concurrency=pw.Concurrency(max=1, key="k"))
def flow_parent(wf, data):
    """A holder whose child run is of the same workflow and key: the child needs no
    slot (else the two would wait for each other forever)."""
    if data.get("child"):
        return wf.do("Leaf", flow_note, data)
    return wf.do("Child", "flow_parent", {**data, "child": True})


@pw.workflow(timeout="1h")
def flow_sleeps(wf, data):
    """Sleeps ``data`` seconds between two steps; its runs time out after an hour."""
    wf.do("Before", flow_note, "before")
    wf.sleep("Nap", data)
    return wf.do("After", flow_note, "after")


@pw.workflow
def flow_waits(wf, data):
    """Suspends (an operator's resume ends it), or waits for an event."""
    if data == "event":
        return wf.wait_for_event("Paid", "paid", key="order-1", timeout="1d")
    return wf.suspend("hold")


@pw.workflow(timeout="10min")
def flow_parent_of_sleeper(wf, data):
    """A parent with a 10 minute timeout whose child has an hour of its own."""
    return wf.do("Child", "flow_sleeps", data)


@pw.workflow
def flow_echo(wf, data):
    """Records its input (the debounce tests)."""
    return wf.do("Echo", flow_note, data)


flow_graph = pw.graph_workflow(
    "flow_graph", {"Note": "flow_note", "Wait": None},
    {"Note": {"next": "Wait"},
     "Wait": {"wait_for_event": {"event": "go", "key": pw.ref("trigger", "k")}}},
    concurrency=pw.Concurrency(max=1, key="k"),
)


@pw.function
def flow_slow(data):
    """Takes ``data`` seconds of the engine clock."""
    clock().sleep(data)
    return data


@pw.workflow(timeout="1min")
def flow_slow_steps(wf, data):
    """A first step longer than the run's timeout: the second never starts."""
    wf.do("Slow", flow_slow, data)
    return wf.do("Next", flow_note, "never")
