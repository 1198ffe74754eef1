"""The workflows of the events and messages tests (tests/unit/test_events*.py, and the
integration tests of events on real workers)."""

from __future__ import annotations

import pikku_workflows as pw
from tests.testapp.shared import CALLS


@pw.function
def ev_note(data):
    CALLS.setdefault("ev_note", []).append(data)
    return data


@pw.workflow
def ev_wait(wf, data):
    """Waits once for ``payment.succeeded`` keyed by the order (``data``: {"order", "timeout"})."""
    got = wf.wait_for_event("Paid", "payment.succeeded", key=data.get("order"),
                            timeout=data.get("timeout"))
    wf.do("After", ev_note, got)
    return got


@pw.workflow
def ev_step_then_wait(wf, data):
    """A step before the wait: an event sent while the step runs is received after it."""
    wf.do("Before", ev_note, data)
    return wf.wait_for_event("Paid", "payment.succeeded", key=data.get("order"))


@pw.workflow
def ev_wait_twice(wf, data):
    first = wf.wait_for_event("First", "tick", key=data.get("key"))
    second = wf.wait_for_event("Second", "tick", key=data.get("key"))
    return [first, second]


@pw.workflow
def ev_recv(wf, data):
    """Receives ``data["count"]`` messages on ``data["topic"]`` (default topic if None)."""
    topic = data.get("topic") or "default"
    got = [wf.recv("Get", topic, timeout=data.get("timeout"))
           for _ in range(data.get("count", 1))]
    return got


@pw.workflow
def ev_suspend_timeout(wf, data):
    answer = wf.suspend("Confirm", timeout=data.get("timeout"))
    return {"answer": answer}


@pw.workflow
def ev_bad_wait(wf, data):
    return wf.wait_for_event("Bad", data["event"], key=data.get("key"))


@pw.function
def ev_send_while_running(data):
    """A step that sends the event its own run waits for next: an event stored between
    the run's creation and its wait."""
    pw.send_event("payment.succeeded", {"paid": data["order"]}, key=data["order"])
    return data


@pw.workflow
def ev_send_then_wait(wf, data):
    wf.do("Send", ev_send_while_running, data)
    return wf.wait_for_event("Paid", "payment.succeeded", key=data["order"])


@pw.workflow
def ev_two_topics(wf, data):
    return {"a": wf.recv("A", "a"), "b": wf.recv("B", "b"), "a2": wf.recv("A", "a")}


pw.graph_workflow(
    "ev_graph",
    nodes={"Paid": None, "Note": "ev_note"},
    config={
        "Paid": {"wait_for_event": {"event": "payment.succeeded",
                                    "key": pw.ref("trigger", "order"), "timeout": "1h"},
                 "next": "Note"},
        "Note": {"input": {"paid": pw.ref("Paid")}},
    },
    output="Note",
)


@pw.function(retries=0)
def ev_boom(data):
    raise RuntimeError("boom")


pw.graph_workflow(
    "ev_graph_fails_beside_a_wait",
    nodes={"Paid": None, "Boom": "ev_boom"},
    config={"Paid": {"wait_for_event": {"event": "payment.succeeded", "key": "f"}}},
)
