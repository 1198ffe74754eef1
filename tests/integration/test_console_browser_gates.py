"""The run page in Chromium follows DESIGN 1.1's table: a run waiting at an approval gate
offers approve/reject and cancel, never resume; its graph says "waiting for approval" in
amber, and after the decision who decided, by username."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

# The browser and the signed-in page of the console's browser tests.
from tests.integration.test_console_browser import (  # noqa: F401
    browser,
    run_url,
    server,
    shot,
    staff_page,
)

pytestmark = pytest.mark.django_db(transaction=True)
GATE = '[data-node="__workflow_approval:Manager sign-off"]'


def tools(page) -> set[str]:
    return {verb for verb in ("resume", "cancel", "retry", "approve", "delete")
            if page.locator(f"a.pk-tool-{verb}").count()}


def test_resume_is_not_offered_at_a_gate(staff_page, server):  # noqa: F811
    run = pw.start_workflow("needs_approval", {"validate": True}, inline=True)
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_APPROVAL"
    page = staff_page
    page.goto(run_url(server, run))
    assert tools(page) == {"approve", "cancel"}
    assert "approval: Manager sign-off" in page.inner_text("#pk-summary")
    gate = page.locator(GATE)
    assert "suspended" in gate.get_attribute("class").split()
    assert "waiting for approval" in gate.text_content()
    assert "__workflow" not in gate.locator("text").all_text_contents()[0]
    # Amber, not red: the gate's border as the browser paints it.
    stroke = gate.locator("rect").first.evaluate("r => getComputedStyle(r).stroke")
    assert stroke == "rgb(216, 155, 28)"
    shot(page, "gate-waiting")
    # Reject from the page, with a note: the gate shows the decision, who and the note.
    page.click("a.pk-tool-approve")
    page.fill("input[name=note]", "too expensive")
    page.click("#pk-confirm input[name=reject]")
    page.wait_for_selector('[data-run-status="completed"]')
    gate = page.locator(GATE)
    text = gate.text_content()
    assert "rejected by operator" in text and "too expensive" in text
    assert "expires" not in text
    assert tools(page) == {"delete"}
    run.refresh_from_db()
    assert run.output["data"] == {"approved": False, "note": "too expensive"}


def test_resume_is_offered_for_a_suspend_gate(staff_page, server):  # noqa: F811
    run = pw.start_workflow("two_gates", {}, inline=True)
    page = staff_page
    page.goto(run_url(server, run))
    assert tools(page) == {"resume", "cancel"}
    page.click("a.pk-tool-resume")
    page.click("#pk-confirm input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert WorkflowRun.objects.get(pk=run.pk).error["message"] == "Awaiting courier"
