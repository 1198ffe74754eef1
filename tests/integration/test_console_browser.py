"""The console in a real browser: Debian's headless Chromium driven by Playwright.

A live run's page turns ``completed`` by itself when a real ``pikku_worker`` finishes
the run; an approval is answered and a failed run retried from the page. Screenshots go
to ``test-artefacts/`` (the README's come from the demo: ``make screenshots``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.unit.docs_blocks import all_blocks

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ARTEFACTS = ROOT / "test-artefacts"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("PIKKU_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{CHROMIUM} is missing (PIKKU_REQUIRE_SERVICES=1)")
        pytest.skip(f"{CHROMIUM} is missing (Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls
    # are ordinary blocking calls between its steps.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM,
                                                  args=["--no-sandbox"])
            yield chromium
            # With Playwright's loop running, the test's ORM calls got a connection of
            # their own context (asgiref's Local): close it here, in that context, or it
            # outlives the test database.
            connections.close_all()
            chromium.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def server(transactional_db, live_server):
    """The live server, started after the test database: at the end of the session it
    stops (and closes its connections) before the database is dropped."""
    return live_server


@pytest.fixture
def staff_page(browser, server, django_user_model):
    """A page signed in as a superuser (the session cookie of a test client login)."""
    user = django_user_model.objects.create_superuser("operator", "op@example.com", "pw")
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    context.add_cookies([{
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": server.url,
    }])
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def shot(page, name: str) -> Path:
    ARTEFACTS.mkdir(exist_ok=True)
    path = ARTEFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def run_url(server, run) -> str:
    return f"{server.url}/admin/pikku_workflows/workflowrun/{run.pk}/change/"


def test_a_live_run_page_turns_completed_by_itself(staff_page, server, workers):
    run = pw.start_workflow("ten_steps", {})  # EXECUTOR "rq": nothing runs yet
    page = staff_page
    page.goto(run_url(server, run))
    assert page.get_attribute("[data-run-status]", "data-run-status") == "running"
    assert "<svg" in page.inner_html("body")  # the graph, server-rendered
    workers.start(1)
    page.wait_for_selector('[data-run-status="completed"]')  # no reload: the page polls
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    shot(page, "run-page")
    for data in ({"fail_times": 5, "retries": 1}, {"fail_times": 1, "retries": 2}):
        pw.start_workflow("retrying", data, inline=True)
    pw.start_workflow("needs_approval", {}, inline=True)
    pw.start_workflow("user_onboarding", {"email": "ada@example.com", "name": "Ada",
                                          "ok": True}, inline=True)
    page.goto(f"{server.url}/admin/pikku_workflows/workflowrun/")
    page.wait_for_selector("#result_list")
    shot(page, "runs-list")


def test_an_approval_is_answered_from_the_page(staff_page, server):
    run = pw.start_workflow("needs_approval", {}, inline=True)
    assert run.status == "suspended"
    page = staff_page
    page.goto(run_url(server, run))
    page.click("a.pk-tool-approve")
    page.fill("textarea[name=decision]", '{"approved": true}')
    shot(page, "approval-form")
    page.click("#pk-confirm input[name=approve]")
    page.wait_for_selector('[data-run-status="completed"]')
    assert "Answered the approval" in page.inner_text(".messagelist")
    run.refresh_from_db()
    assert run.output["status"] == "decided" and run.output["data"] == {"approved": True}


def test_a_failed_run_is_retried_from_the_page(staff_page, server):
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 0}, inline=True)
    assert run.status == "failed"
    page = staff_page
    page.goto(run_url(server, run))
    assert "failed" in page.inner_text("#pk-graph")
    page.click("a.pk-tool-retry")
    page.click("#pk-confirm input[type=submit]")
    page.wait_for_selector('[data-run-status="completed"]')
    shot(page, "retried-run")
    assert WorkflowRun.objects.get(pk=run.pk).steps.get().attempt_count == 2



def test_the_stream_sample_of_the_api_docs_runs_in_the_browser(staff_page, server):
    """docs/api.md's EventSource sample, as written, against the live server."""
    block = next(b for b in all_blocks() if b.lang == "js")
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2}, inline=True)
    assert run.status == "completed"
    page = staff_page
    page.goto(f"{server.url}/admin/")  # same origin: the session signs the stream in
    page.evaluate("() => { window.seen = []; "
                  "window.render = (run) => window.seen.push(run.status); }")
    page.evaluate(f"(id) => {{ {block.code} }}", str(run.pk))
    page.wait_for_function("window.seen.includes('completed')")
