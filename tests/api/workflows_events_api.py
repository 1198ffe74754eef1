"""The workflows of the REST API's event and message tests (tests/api/test_events.py)."""

from __future__ import annotations

import pikku_workflows as pw


@pw.workflow
def api_awaits_payment(wf, data):
    """Waits for ``payment.succeeded`` with the order's key, then publishes what it got."""
    paid = wf.wait_for_event("Payment", "payment.succeeded", key=data.get("order"),
                             timeout=data.get("timeout"))
    wf.set_state("paid", paid)
    wf.set_state("order", data.get("order"))
    return {"paid": paid}


@pw.workflow
def api_reads_notes(wf, data):
    """Receives two messages on ``notes``, in the order they were sent."""
    first = wf.recv("First", topic="notes")
    second = wf.recv("Second", topic="notes")
    return {"notes": [first, second]}
