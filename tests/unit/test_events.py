"""Events, messages and timeouts (DESIGN section 8.2) on the inline executor."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowEvent, WorkflowMessage, WorkflowRun, WorkflowWait
from pikku_workflows.testing import fake_clock
from tests.testapp.shared import CALLS

pytestmark = pytest.mark.django_db


def reload(run):
    return WorkflowRun.objects.get(pk=run.pk)


def test_a_run_waits_suspended_and_the_event_wakes_it_inline():
    run = pw.start_workflow("ev_wait", {"order": "order-8"})
    run = reload(run)
    assert run.status == "suspended"
    assert run.error["code"] == "WAITING_FOR_EVENT"
    assert run.error["message"] == "waiting for event 'payment.succeeded' (key 'order-8')"
    assert run.error["event"] == "payment.succeeded"
    assert run.error["key"] == "order-8"
    assert run.error["timeout_at"] is None
    result = pw.send_event("payment.succeeded", {"amount": 5}, key="order-8")
    assert result.woken == 1 and result.created
    run = reload(run)
    assert run.status == "completed"
    assert run.output == {"amount": 5}
    wait = WorkflowWait.objects.get(run=run)
    assert (wait.outcome, wait.event_id, wait.kind) == ("received", result.id, "event")


def test_send_result_is_exported_and_frozen():
    result = pw.send_event("nobody.waits")
    assert isinstance(result, pw.SendResult)
    assert result.woken == 0
    with pytest.raises(AttributeError):
        result.woken = 3  # type: ignore[misc]
