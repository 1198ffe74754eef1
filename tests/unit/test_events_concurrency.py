"""Idempotent sends under real concurrency: 8 processes send the same idempotency key at
the same moment (on SQLite's file database and on PostgreSQL, whichever the suite runs on)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowEvent, WorkflowMessage
from tests.processes import all_at_once

PROCESSES = 8

SENDER = """
event = pw.send_event("paid", {"n": 1}, key="order-1", idempotency_key="same-key")
message = pw.send(os.environ["EV_RUN"], {"m": 1}, idempotency_key="same-key")
print(json.dumps([event.id, event.created, message.id, message.created]))
"""


@pytest.mark.django_db(transaction=True)
def test_eight_processes_sending_the_same_key_at_once_store_one_row(tmp_path):
    run = pw.start_workflow("ev_recv", {"count": 2})
    results = all_at_once(SENDER, tmp_path, processes=PROCESSES, env={"EV_RUN": str(run.pk)})
    event_ids = {r[0] for r in results}
    message_ids = {r[2] for r in results}
    assert len(event_ids) == 1 and len(message_ids) == 1
    assert sorted(r[1] for r in results) == [False] * (PROCESSES - 1) + [True]
    assert sorted(r[3] for r in results) == [False] * (PROCESSES - 1) + [True]
    assert WorkflowEvent.objects.filter(idempotency_key="same-key").count() == 1
    assert WorkflowMessage.objects.filter(run=run, idempotency_key="same-key").count() == 1
    run.refresh_from_db()
    assert run.status == "suspended"  # one message delivered, the second recv still waits
    assert run.messages.get().received_by == "Get"
