"""A run never ends with live children, nesting is bounded, and a run deleted under its
own step is reported as not found (issue 23, defects 1, 3 and 8)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.engine import store
from pikku_workflows.exceptions import WorkflowRunStateError
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.runtime.recovery import sweep
from tests.conftest import API, client_for

pytestmark = pytest.mark.django_db

LIVE = ("running", "suspended")


def assert_no_orphans():
    """No finished run has a live child; no child step stays open in a finished run."""
    finished = ("completed", "failed", "cancelled")
    assert not WorkflowRun.objects.filter(status__in=LIVE,
                                          parent_run__status__in=finished).exists()
    assert not WorkflowStep.objects.filter(
        run__status__in=finished, child_run__isnull=False,
        status__in=("pending", "scheduled", "running")).exists()


# --- defect 1: a parent ends while a child lives ------------------------------------------


@pytest.mark.parametrize("workflow, status", [("parent_child_and_failure", "failed"),
                                              ("parent_catches_child_sibling", "completed")])
def test_a_run_that_ends_cancels_its_live_children_and_closes_their_steps(workflow, status):
    run = pw.start_workflow(workflow, {})
    assert run.status == status
    child = WorkflowRun.objects.get(parent_run=run)
    assert child.status == "cancelled"
    assert child.error["code"] == "WORKFLOW_CANCELLED"
    assert str(run.pk) in child.error["message"] and status in child.error["message"]
    step = WorkflowStep.objects.get(run=run, step_name="Child")
    assert step.status == "failed" and step.error["code"] == "WORKFLOW_CANCELLED"
    assert step.attempts.get().failed_at is not None
    assert_no_orphans()
    with pytest.raises(WorkflowRunStateError):
        pw.resume_run(child.pk, {"late": True})


def test_retrying_the_parent_starts_a_new_child_for_the_cancelled_one():
    run = pw.start_workflow("parent_child_and_failure", {})
    first = WorkflowRun.objects.get(parent_run=run)
    assert pw.retry_run(run.pk).status == "failed"  # "Broken" fails again
    second = WorkflowRun.objects.filter(parent_run=run).exclude(pk=first.pk).get()
    assert second.status == "cancelled"  # ended with its parent again
    step = WorkflowStep.objects.get(run=run, step_name="Child")
    assert step.child_run_id == second.pk and step.attempt_count == 2
    assert_no_orphans()


def test_the_cascade_reaches_grandchildren():
    run = pw.start_workflow("grandparent_of_suspended", {})
    assert run.status == "failed"
    middle = WorkflowRun.objects.get(parent_run=run)
    grandchild = WorkflowRun.objects.get(parent_run=middle)
    assert middle.status == "cancelled" and grandchild.status == "cancelled"
    assert_no_orphans()


def finished_parent_with_live_child():
    """A finished parent whose child still lives (as runs left by earlier versions)."""
    run = pw.start_workflow("parent_child_and_failure", {})
    child = WorkflowRun.objects.get(parent_run=run)
    WorkflowRun.objects.filter(pk=child.pk).update(status="suspended", finished_at=None)
    return run, child


def test_recovery_ends_the_children_a_dead_process_left_live():
    """The process that ended the parent died before its cascade (a SIGKILL)."""
    run, child = finished_parent_with_live_child()
    WorkflowStep.objects.filter(run=run, step_name="Child").update(status="running",
                                                                  error=None)
    assert sweep()["orphans"] == 1
    assert WorkflowRun.objects.get(pk=child.pk).status == "cancelled"
    assert WorkflowStep.objects.get(run=run, step_name="Child").status == "failed"
    assert_no_orphans()
    assert sweep()["orphans"] == 0


def test_store_delete_refuses_a_run_with_live_descendants():
    run, child = finished_parent_with_live_child()
    with pytest.raises(WorkflowRunStateError, match="live descendant"):
        store.delete_runs([run.pk])
    assert WorkflowRun.objects.filter(pk__in=[run.pk, child.pk]).count() == 2
    # A grandchild counts too.
    grand = pw.start_workflow("grandparent_of_suspended", {})
    middle = WorkflowRun.objects.get(parent_run=grand)
    WorkflowRun.objects.filter(parent_run=middle).update(status="running", finished_at=None)
    with pytest.raises(WorkflowRunStateError):
        store.delete_runs([grand.pk])
    assert WorkflowRun.objects.filter(pk=grand.pk).exists()


def test_prune_keeps_a_run_with_a_live_grandchild():
    grand = pw.start_workflow("grandparent_of_suspended", {})
    middle = WorkflowRun.objects.get(parent_run=grand)
    WorkflowRun.objects.filter(parent_run=middle).update(status="running", finished_at=None)
    done = pw.start_workflow("sequential", {"x": 1})
    out = StringIO()
    call_command("pikku_prune", "--older-than", "0s", stdout=out)
    assert WorkflowRun.objects.filter(pk=grand.pk).exists()
    assert not WorkflowRun.objects.filter(pk=done.pk).exists()


def test_api_delete_of_a_run_with_a_live_child_is_409(users):
    run, child = finished_parent_with_live_child()
    staff = client_for(users["staff"])
    response = staff.delete(f"{API}runs/{run.pk}/")
    assert response.status_code == 409
    assert response.json()["code"] == "INVALID_RUN_STATE"
    assert str(child.pk) in response.json()["detail"]
    assert WorkflowRun.objects.filter(pk=child.pk, status="suspended").exists()


def test_admin_delete_of_a_run_with_a_live_child_is_refused(admin_client: Client):
    run, child = finished_parent_with_live_child()
    url = reverse("admin:pikku_workflows_workflowrun_delete", args=[run.pk])
    page = admin_client.post(url, {}, follow=True).content.decode()
    assert "live descendant" in page
    assert WorkflowRun.objects.filter(pk__in=[run.pk, child.pk]).count() == 2
    done = pw.start_workflow("sequential", {"x": 1})
    changelist = reverse("admin:pikku_workflows_workflowrun_changelist")
    page = admin_client.post(changelist, {
        "action": "delete_runs", "_selected_action": [str(run.pk), str(done.pk)],
        "confirm": "yes"}, follow=True).content.decode()
    assert "1 run(s) deleted" in page and "1 refused" in page
    assert WorkflowRun.objects.filter(pk__in=[run.pk, child.pk]).count() == 2
    assert not WorkflowRun.objects.filter(pk=done.pk).exists()


# --- defect 3: unbounded child nesting ----------------------------------------------------


def test_nesting_deeper_than_max_child_depth_fails_the_step_before_any_child_row(settings):
    settings.PIKKU_WORKFLOWS = {"MAX_CHILD_DEPTH": 3}
    run = pw.start_workflow("nests_itself", {"n": 10})
    assert run.status == "failed"
    runs = list(WorkflowRun.objects.all())
    assert len(runs) == 4  # the run and three levels of children: no fifth row
    assert all(r.status == "failed" for r in runs)
    deepest = next(r for r in runs if not WorkflowRun.objects.filter(parent_run=r).exists())
    step = WorkflowStep.objects.get(run=deepest, step_name="Deeper")
    assert step.status == "failed" and step.child_run_id is None
    assert step.error["code"] == "CHILD_DEPTH_EXCEEDED"
    assert "MAX_CHILD_DEPTH" in step.error["message"] and "3" in step.error["message"]
    assert deepest.error["code"] == "STEP_FAILED"
    assert_no_orphans()


def test_nesting_within_max_child_depth_completes(settings):
    settings.PIKKU_WORKFLOWS = {"MAX_CHILD_DEPTH": 3}
    assert pw.run_to_completion("nests_itself", {"n": 3}) == 3


def test_the_default_bound_stops_a_self_recursive_workflow():
    run = pw.start_workflow("nests_itself", {"n": 1000})
    assert run.status == "failed"
    assert WorkflowRun.objects.count() == 33  # the run and 32 levels of children
    assert not WorkflowRun.objects.filter(status__in=LIVE).exists()
    assert_no_orphans()


def test_an_inline_recursion_error_leaves_no_orphan(settings):
    settings.PIKKU_WORKFLOWS = {"MAX_CHILD_DEPTH": 10_000}
    run = pw.start_workflow("nests_itself", {"n": 10_000})
    assert run.status == "failed"
    assert not WorkflowRun.objects.filter(status__in=LIVE).exists()
    assert not WorkflowStep.objects.filter(status__in=("running", "pending")).exists()
    assert WorkflowRun.objects.count() < 1000
    assert_no_orphans()


# --- defect 8: a run deleted during its inline step ------------------------------------------


@pytest.mark.parametrize("then", [None, "After"])
def test_a_run_deleted_by_its_own_step_is_not_found(then):
    with pytest.raises(pw.WorkflowRunNotFoundError):
        pw.start_workflow("deletes_itself", {"then": then})
    assert not WorkflowRun.objects.exists()
