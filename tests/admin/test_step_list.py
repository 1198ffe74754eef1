"""The run page's step list on big runs: counts per status, a status filter that pages,
"Jump to first failure", and the same queries for 10 steps and for 300."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from pikku_workflows.admin.graph_svg import step_anchor
from pikku_workflows.models import WorkflowRun, WorkflowStep

pytestmark = pytest.mark.django_db


def big_run(steps: int, failed_every: int = 7) -> WorkflowRun:
    run = WorkflowRun.objects.create(workflow="synthetic", status="failed")
    WorkflowStep.objects.bulk_create([WorkflowStep(
        run=run, step_name=f"step {i}", rpc_name="f",
        status="failed" if i % failed_every == 3 else "succeeded" if i % 5 else "scheduled")
        for i in range(steps)])
    return run


def page(client, run, query: str = "") -> str:
    url = reverse("admin:pikku_workflows_workflowrun_change", args=[run.pk])
    return client.get(url + query).content.decode()


def statuses(html: str) -> list[str]:
    return re.findall(r'<details class="pk-step" id="[^"]*" data-step-status="(\w+)"', html)


def test_counts_per_status_and_the_filter(admin_client):
    run = big_run(300, failed_every=4)
    expected = {s: WorkflowStep.objects.filter(run=run, status=s).count()
                for s in ("failed", "succeeded", "scheduled")}
    html = page(admin_client, run)
    counts = dict(re.findall(r'data-step-filter="(\w+)" data-count="(\d+)"', html))
    assert counts == {"all": "300", **{s: str(n) for s, n in expected.items()}}
    failed = page(admin_client, run, "?step_status=failed")
    assert set(statuses(failed)) == {"failed"}
    assert len(statuses(failed)) == min(expected["failed"], 50)
    assert f"Steps 1-50 of {expected['failed']} failed" in failed
    assert "?step_status=failed&amp;steps=2" in failed
    second = page(admin_client, run, "?step_status=failed&steps=2")
    assert set(statuses(second)) == {"failed"}
    # An unknown status is no filter.
    assert len(statuses(page(admin_client, run, "?step_status=nope"))) == 50


def test_jump_to_first_failure(admin_client):
    run = big_run(300)
    html = page(admin_client, run, "?steps=4")
    first = WorkflowStep.objects.filter(run=run, status="failed").order_by("id").first()
    link = re.search(r'<a href="([^"]+)" class="pk-first-failure">', html)
    assert link is not None
    target = link.group(1).replace("&amp;", "&")
    assert target.endswith("#" + step_anchor(first.step_name))
    landed = page(admin_client, run, target.split("#")[0])
    assert f'id="{step_anchor(first.step_name)}" data-step-status="failed"' in landed
    assert statuses(landed)[0] == "failed"
    fine = big_run(3)  # steps 0 to 2: none failed
    assert "pk-first-failure" not in page(admin_client, fine)


def test_the_step_list_costs_the_same_queries_for_10_and_300_steps(admin_client):
    def count(run, query=""):
        with CaptureQueriesContext(connection) as captured:
            page(admin_client, run, query)
        return len(captured)

    small, large = big_run(10), big_run(300)
    assert count(small) == count(large)
    assert count(small, "?step_status=failed") == count(large, "?step_status=failed")


def test_steps_waiting_to_retry_are_counted_apart_from_failures(admin_client):
    from django.utils import timezone

    run = WorkflowRun.objects.create(workflow="synthetic", status="running")
    later = timezone.now() + timezone.timedelta(minutes=5)
    WorkflowStep.objects.bulk_create(
        [WorkflowStep(run=run, step_name=f"retrying {i}", rpc_name="f", status="failed",
                      wake_at=later) for i in range(3)]
        + [WorkflowStep(run=run, step_name=f"failed {i}", rpc_name="f", status="failed")
           for i in range(2)])
    html = page(admin_client, run)
    counts = dict(re.findall(r'data-step-filter="(\w+)" data-count="(\d+)"', html))
    assert counts == {"all": "5", "failed": "2", "retrying": "3"}
    link = re.search(r'<a href="([^"]+)" class="pk-first-failure">', html)
    assert link is not None and link.group(1).endswith("#" + step_anchor("failed 0"))
    shown = page(admin_client, run, "?step_status=retrying")
    assert sorted(re.findall(r'id="(step-retrying-\d[^"]*)"', shown)) == sorted(
        step_anchor(f"retrying {i}") for i in range(3))
    # Once the run has ended, nothing waits any more: they are failures.
    WorkflowRun.objects.filter(pk=run.pk).update(status="failed")
    counts = dict(re.findall(r'data-step-filter="(\w+)" data-count="(\d+)"',
                             page(admin_client, run)))
    assert counts == {"all": "5", "failed": "5"}
