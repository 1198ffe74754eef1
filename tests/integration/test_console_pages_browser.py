"""The run page's truths in a real browser (Debian's Chromium, Playwright): the actions
follow a live refresh, the audit lists who did what, the approve form takes the keyboard,
the graph fits a narrow screen. The fixtures are those of test_console_browser.py."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.integration import test_console_browser as console_browser
from tests.integration.test_console_browser import run_url, shot

# The fixtures of test_console_browser.py (a browser, the live server, a signed-in page).
browser = console_browser.browser
server = console_browser.server
staff_page = console_browser.staff_page

pytestmark = pytest.mark.django_db(transaction=True)


def test_after_a_live_completion_the_cancel_button_is_gone(staff_page, server):
    run = pw.start_workflow("held_until_resumed", {}, inline=True)
    assert run.status == "suspended"
    page = staff_page
    page.goto(run_url(server, run))
    assert page.locator("#pk-tools a.pk-tool-cancel").count() == 1
    assert page.locator("#pk-tools a.pk-tool-delete").count() == 0
    pw.resume_run(run.pk, {"dock": 4})  # inline: completes here, not through the page
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    page.wait_for_selector('#pk-summary [data-run-status="completed"]')  # no reload
    page.wait_for_selector("#pk-tools a.pk-tool-delete")
    assert page.locator("#pk-tools a.pk-tool-cancel").count() == 0
    assert page.locator("#pk-tools a.pk-tool-resume").count() == 0


def test_the_audit_lists_start_approve_and_cancel_with_usernames(staff_page, server):
    page = staff_page
    page.goto(f"{server.url}/admin/pikku_workflows/registeredworkflow/")
    page.click("#workflow-approve_then_hold form.pk-start input[type=submit]")
    page.wait_for_selector('#pk-summary [data-run-status="suspended"]')
    page.click("a.pk-tool-approve")
    # The keyboard is in the form's first field at once.
    assert page.evaluate("document.activeElement.name") == "decision"
    page.keyboard.type('{"note": "fine by me"}')
    page.click("#pk-confirm input[name=approve]")
    page.wait_for_selector(".messagelist")
    page.click("a.pk-tool-cancel")
    assert page.evaluate("document.activeElement.name") == "reason"
    page.keyboard.type("customer changed their mind")
    page.click("#pk-confirm input[type=submit]")
    page.wait_for_selector('#pk-summary [data-run-status="cancelled"]')
    rows = page.locator("#pk-audit tr.pk-audit-entry")
    seen = [(rows.nth(i).get_attribute("data-audit-what"),
             rows.nth(i).get_attribute("data-audit-who")) for i in range(rows.count())]
    assert seen == [("started", "operator"), ("approved", "operator"),
                    ("cancelled", "operator")]
    text = page.inner_text("#pk-audit")
    assert "fine by me" in text and "customer changed their mind" in text
    assert "Sign-off" in text
    shot(page, "run-audit")


def test_on_a_narrow_screen_the_graph_fits_and_zooms(browser, server, staff_page):
    run = pw.start_workflow("user_onboarding", {"email": "ada@example.com", "name": "Ada",
                                                "ok": True}, inline=True)
    page = staff_page
    page.set_viewport_size({"width": 420, "height": 900})
    page.goto(run_url(server, run))
    box = page.locator("#pk-graph")
    graph = page.locator("#pk-graph svg.pk-graph")
    natural = float(graph.get_attribute("width"))
    fitted = graph.bounding_box()
    assert fitted["width"] <= box.bounding_box()["width"] + 0.5
    assert natural > fitted["width"]  # scaled down, whole: nothing hidden
    view_box = [float(v) for v in graph.get_attribute("viewBox").split()]
    assert abs(fitted["height"] / fitted["width"] - view_box[3] / view_box[2]) < 0.02
    page.click("button.pk-zoom")
    assert abs(graph.bounding_box()["width"] - natural) < 0.5
    assert page.evaluate("(() => { const b = document.getElementById('pk-graph'); "
                         "return b.scrollWidth > b.clientWidth; })()")
    assert page.get_attribute("button.pk-zoom", "aria-pressed") == "true"
    shot(page, "narrow-run-page")
