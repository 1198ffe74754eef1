"""What operators reach for first, in a real browser (Debian's headless Chromium): the
timeline's lanes, search by content in the runs list, a version comparison."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowVersion
from pikku_workflows.testing import fake_clock
from tests.integration import test_console_browser as base

pytestmark = pytest.mark.django_db(transaction=True)

# The browser, the live server and a superuser's page: test_console_browser's fixtures.
browser, server, staff_page = base.browser, base.server, base.staff_page
run_url, shot = base.run_url, base.shot


def test_the_timeline_draws_one_lane_per_step(staff_page, server):
    with fake_clock(timezone.now() - timedelta(days=8)):
        run = pw.start_workflow("every_kind_of_attempt", {"nap": "3d"}, inline=True)
    assert run.status == "completed"
    page = staff_page
    page.goto(run_url(server, run))
    lanes = page.eval_on_selector_all(
        "#pk-timeline [data-lane]", "gs => gs.map(g => g.getAttribute('data-lane'))")
    assert lanes[:4] == ["Flaky", "Add", "Declined", "Declined:onError"]
    labels = page.eval_on_selector_all("#pk-timeline [data-lane] > text",
                                       "ts => ts.map(t => t.lastChild.textContent)")
    assert labels[2:4] == ["Declined", "Declined (on error)"]
    assert len(lanes) == len(set(lanes)) == run.steps.count()
    flaky = page.locator('#pk-timeline [data-lane="Flaky"] [data-attempt]')
    assert flaky.count() == 3
    boxes = [flaky.nth(i).bounding_box() for i in range(3)]
    lane_box = page.locator('#pk-timeline [data-lane="Flaky"] .pk-tl-band').bounding_box()
    # The attempts sit inside their lane, left to right.
    assert all(lane_box["y"] <= b["y"] and b["y"] + b["height"] <= lane_box["y"]
               + lane_box["height"] for b in boxes)
    assert [b["x"] for b in boxes] == sorted(b["x"] for b in boxes)
    # The 3-day nap is cut out: one break, and the nap no wider than a few dozen pixels.
    assert page.locator("#pk-timeline [data-break-seconds]").count() == 1
    nap = page.locator('#pk-timeline [data-lane="Nap"] [data-wait="sleep"]').bounding_box()
    assert nap["width"] < 60
    shot(page, "timeline")
    # A run on the real clock: its axis has ticks, in units.
    real = pw.start_workflow("retrying", {"fail_times": 2, "retries": 2}, inline=True)
    page.goto(run_url(server, real))
    ticks = page.eval_on_selector_all("#pk-timeline .pk-tl-tick-label",
                                      "ts => ts.map(t => t.textContent)")
    assert len(ticks) >= 2 and ticks[0] == "0"
    assert all(t == "0" or t.endswith(("ms", " s")) for t in ticks)
    shot(page, "timeline-retries")


def test_search_runs_by_content(staff_page, server):
    wanted = WorkflowRun.objects.create(workflow="search", status="completed",
                                        input={"order_id": 8, "customer": {
                                            "email": "ada@example.com"}})
    WorkflowRun.objects.create(workflow="search", status="completed",
                               input={"order_id": "8", "customer": {"email": "ada@example.com"}})
    WorkflowRun.objects.create(workflow="search", status="completed", input={"order_id": 9})
    page = staff_page
    page.goto(f"{server.url}/admin/pikku_workflows/workflowrun/")
    page.fill("#searchbar", "order_id=8 customer.email=ada@example.com")
    page.press("#searchbar", "Enter")
    page.wait_for_selector("#result_list")
    shown = page.eval_on_selector_all("#result_list tbody tr th a",
                                      "links => links.map(a => a.textContent.trim())")
    assert shown == [str(wanted.pk)[:8]]
    shot(page, "content-search")
    page.fill("#searchbar", "tags=[1]")
    page.press("#searchbar", "Enter")
    page.wait_for_selector(".messagelist")
    assert "arrays are not supported" in page.inner_text(".messagelist")


def test_two_versions_are_compared(staff_page, server):
    pw.start_workflow("branching", {"amount": 5}, inline=True)
    old = WorkflowVersion.objects.get(workflow="branching")
    graph = copy.deepcopy(old.graph)
    graph["nodes"] = [n for n in graph["nodes"] if n["id"] != "Full price"]
    graph["edges"] = [e for e in graph["edges"] if "Full price" not in (e["source"],
                                                                        e["target"])]
    graph["nodes"].append({"id": "Audit", "kind": "step", "label": "Audit",
                           "step_name": "Audit", "rpc_name": "echo"})
    new = WorkflowVersion.objects.create(workflow="branching", graph_hash="feedc0ffee12",
                                         graph=graph, source=old.source)
    page = staff_page
    page.goto(f"{server.url}/admin/pikku_workflows/registeredworkflow/")
    page.click("#workflow-branching summary:has-text('versions')")
    page.click(f"text={new.graph_hash}")
    page.wait_for_selector("#pk-version-graph svg [data-node='Audit']")
    page.select_option("select[name=compare]", str(old.pk))
    page.click(".pk-compare input[type=submit]")
    page.wait_for_selector("#pk-diff")
    changes = page.eval_on_selector_all(
        "#pk-diff [data-change]", "rows => rows.map(r => [r.dataset.change, r.dataset.step])")
    assert sorted(c for c in changes if c[1] is not None) == [["added", "Audit"],
                                                               ["removed", "Full price"]]
    shot(page, "version-comparison")
