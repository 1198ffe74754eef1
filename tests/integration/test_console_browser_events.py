"""A run waiting for an event, in Chromium: its page says what it waits for, offers no
resume, and sending the event from the page's form lets the run go on to its end."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

import pikku_workflows as pw
from pikku_workflows.models import WorkflowEvent, WorkflowRun

# The browser and the signed-in page of the console's browser tests.
from tests.integration.test_console_browser import (  # noqa: F401
    browser,
    run_url,
    server,
    shot,
    staff_page,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pw.workflow
def browser_waits_for_payment(wf, data):
    paid = wf.wait_for_event("Payment", "payment.succeeded", key=data["key"], timeout="1h")
    wf.do("Ship", lambda: "shipped")
    return {"paid": paid}


def test_sending_the_event_from_the_run_page_continues_the_run(staff_page, server):  # noqa: F811
    run = pw.start_workflow("browser_waits_for_payment", {"key": "order-8"}, inline=True)
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_EVENT"
    page = staff_page
    page.goto(run_url(server, run))
    summary = page.inner_text("#pk-summary")
    assert "waiting for event payment.succeeded (key order-8) until" in summary
    assert page.locator("a.pk-tool-resume").count() == 0
    assert page.locator("a.pk-tool-cancel").count() == 1
    # The form names the wait's event and key already: only the data is typed.
    assert page.input_value("#pk-send-event input[name=event]") == "payment.succeeded"
    assert page.input_value("#pk-send-event input[name=key]") == "order-8"
    shot(page, "event-waiting")
    page.fill("#pk-send-event textarea[name=payload]", '{"amount": 40}')
    page.click("#pk-send-event-button")
    page.wait_for_selector('[data-run-status="completed"]')
    assert "woke 1 run(s)" in page.inner_text(".messagelist")
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"paid": {"amount": 40}}
    assert WorkflowEvent.objects.get().sent_by.username == "operator"
    assert page.locator('[data-audit-what="sent the event"]').count() == 1
    assert LogEntry.objects.filter(object_id=str(run.pk)).count() == 1
    assert WorkflowRun.objects.get(pk=run.pk).steps.filter(step_name="Ship").exists()


def test_an_event_sent_from_the_page_wakes_a_run_on_a_real_worker(
        staff_page, server, workers):  # noqa: F811
    """On the RQ executor: the run waits holding no worker; the page's send enqueues its
    continuation once the event is committed, a ``pikku_worker`` runs it, and the page,
    polling, turns completed by itself."""
    run = pw.start_workflow("ev_wait", {"order": "order-8", "timeout": "1h"})
    workers.start(1)
    page = staff_page
    page.goto(run_url(server, run))
    page.wait_for_selector('[data-run-status="suspended"]')  # the page polls
    page.reload()  # the send form is drawn with the page, not by the live refresh
    assert "waiting for event payment.succeeded (key order-8) until" in page.inner_text(
        "#pk-summary")
    page.fill("#pk-send-event textarea[name=payload]", '{"amount": 8}')
    page.click("#pk-send-event-button")
    page.wait_for_selector('[data-run-status="completed"]')
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"amount": 8}
    assert run.steps.get(step_name="After").status == "succeeded"
