"""DESIGN 1.1's table for a run waiting at an approval gate: its code is
``WAITING_FOR_APPROVAL``; it is approved, rejected or cancelled, never resumed (Python API,
REST API, console), and it sits in the approvals triage list, not the suspended one. Runs
stored with the old code at a gate are recognised too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import SuspensionCode
from pikku_workflows.step_keys import approval_wait
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

API = "/api/workflows/"
GATE = "__workflow_approval:Manager sign-off"


def gated(**data):
    run = pw.start_workflow("needs_approval", data)
    assert run.status == "suspended"
    return run


def as_legacy(run):
    """The run as releases up to 0.1.0 stored it at a gate."""
    WorkflowRun.objects.filter(pk=run.pk).update(
        error={**run.error, "code": "WORKFLOW_SUSPENDED"})
    return WorkflowRun.objects.get(pk=run.pk)


def test_a_run_at_an_approval_gate_waits_for_approval():
    run = gated()
    assert run.error == {"code": "WAITING_FOR_APPROVAL", "message": "Manager sign-off",
                         "step": GATE}
    assert pw.get_run_status(run.pk)["error"]["code"] == "WAITING_FOR_APPROVAL"
    suspended = pw.start_workflow("two_gates", {})
    assert suspended.error["code"] == "WORKFLOW_SUSPENDED"
    assert approval_wait(run.error) == GATE and approval_wait(suspended.error) is None
    assert approval_wait(as_legacy(run).error) == GATE  # the old code, at a gate
    assert approval_wait(None) is None
    assert set(SuspensionCode.resumable()) == {"WORKFLOW_SUSPENDED", "RPC_NOT_FOUND",
                                               "VERSION_CONFLICT"}


@pytest.mark.parametrize("legacy", [False, True])
def test_resume_refuses_a_run_waiting_for_approval_and_writes_nothing(legacy):
    run = gated()
    if legacy:
        run = as_legacy(run)
    before = WorkflowRun.objects.get(pk=run.pk)
    with pytest.raises(pw.WorkflowRunStateError) as refused:
        pw.resume_run(run.pk, {"anything": 1})
    assert refused.value.code == "WAITING_FOR_APPROVAL" and refused.value.http_status == 409
    assert "approval 'Manager sign-off'" in str(refused.value)
    assert "approve" in str(refused.value)
    after = WorkflowRun.objects.get(pk=run.pk)
    assert (after.status, after.error, after.updated_at) == (
        before.status, before.error, before.updated_at)
    # What the table offers instead works: the decision, then the run goes on.
    pw.approve_step(run.pk, "Manager sign-off", {"approved": True})
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"


def test_other_state_errors_keep_their_code():
    run = pw.start_workflow("sequential", {"x": 1})
    with pytest.raises(pw.WorkflowRunStateError) as refused:
        pw.resume_run(run.pk)
    assert refused.value.code == "INVALID_RUN_STATE"


def test_a_gated_run_can_be_cancelled():
    run = gated()
    assert pw.cancel_run(run.pk, "no longer needed").status == "cancelled"


def test_the_api_answers_409_pointing_to_approve(users):
    run = gated()
    staff = client_for(users["staff"])
    answer = staff.post(f"{API}runs/{run.pk}/resume/", {"data": {}}, format="json")
    assert answer.status_code == 409
    body = answer.json()
    assert body["code"] == "WAITING_FOR_APPROVAL" and "approve" in body["detail"]
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"
    detail = staff.get(f"{API}runs/{run.pk}/").json()
    assert detail["error"] == {"code": "WAITING_FOR_APPROVAL", "message": "Manager sign-off",
                               "step": "approval:Manager sign-off"}
    # A row stored by an older release answers the same.
    as_legacy(run)
    assert staff.get(f"{API}runs/{run.pk}/").json()["error"]["code"] == \
        "WAITING_FOR_APPROVAL"
    assert staff.post(f"{API}runs/{run.pk}/resume/", {}, format="json").json()["code"] == \
        "WAITING_FOR_APPROVAL"
    approved = staff.post(f"{API}runs/{run.pk}/approve/",
                          {"reason": "Manager sign-off", "decision": {"ok": 1}}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "decided"


def test_the_run_endpoint_names_the_wait(users):
    answer = client_for(users["owner"]).post(f"{API}workflows/needs_approval/run/",
                                             {"data": {}}, format="json")
    assert answer.status_code == 409 and answer.json()["code"] == "WAITING_FOR_APPROVAL"


def _tools(client, run):
    page = client.get(reverse("admin:pikku_workflows_workflowrun_change", args=[run.pk]))
    body = page.content.decode()
    return {verb for verb in ("resume", "cancel", "retry", "approve", "delete")
            if f"pk-tool-{verb}" in body}, body


@pytest.mark.parametrize("legacy", [False, True])
def test_the_console_offers_approve_and_cancel_not_resume(admin_client, legacy):
    run = gated()
    if legacy:
        run = as_legacy(run)
    tools, body = _tools(admin_client, run)
    assert tools == {"approve", "cancel"}
    # Amber "waiting for approval", not a red error.
    assert 'data-wait="approval"' in body and "approval: Manager sign-off" in body
    assert 'class="pk-error"' not in body
    # The steps table names the gate as the user did, with its kind; its key in a tooltip.
    steps = body[body.index('id="pk-steps"'):body.index("<h2>Data</h2>")]
    assert '<strong title="approval:Manager sign-off">Manager sign-off</strong>' in steps
    assert 'class="pk-kind pk-kind-approval">approval<' in steps
    assert "__workflow" not in steps.replace(f'"{GATE}"', "")
    # So does the Data section's error (the API's form: an old row's code is the new one).
    data = body[body.index("<h2>Data</h2>"):]
    assert "__workflow" not in data and "approval:Manager sign-off" in data
    assert "WAITING_FOR_APPROVAL" in data and "WORKFLOW_SUSPENDED" not in data
    suspended_tools, suspended_body = _tools(admin_client, pw.start_workflow("two_gates", {}))
    assert suspended_tools == {"resume", "cancel"}
    assert 'data-wait="WORKFLOW_SUSPENDED"' in suspended_body
    # Posting a resume anyway is refused with the reason, and nothing changes.
    page = admin_client.post(reverse("admin:pikku_workflows_workflowrun_resume",
                                     args=[run.pk]), {"payload": ""}, follow=True)
    assert "Resume refused" in page.content.decode()
    assert "waits for the approval" in page.content.decode()
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"


def test_the_triage_lists_follow_the_table(admin_client):
    waiting, legacy = gated(), as_legacy(gated())
    suspended = pw.start_workflow("two_gates", {})
    missing = pw.start_workflow("calls_missing_function", {})
    assert missing.error["code"] == "RPC_NOT_FOUND"
    # A run of a workflow its process did not know: an error without a step.
    undeployed = pw.start_workflow("sequential", {"x": 1})
    WorkflowRun.objects.filter(pk=undeployed.pk).update(status="suspended", error={
        "code": "RPC_NOT_FOUND", "message": "workflow 'sequential' is not registered"})
    # New code reaching a gate the run never recorded: a conflict for an operator.
    conflict = pw.start_workflow("sequential", {"x": 1})
    WorkflowRun.objects.filter(pk=conflict.pk).update(status="suspended", error={
        "code": "VERSION_CONFLICT", "message": "diverged", "step": GATE})
    assert approval_wait(WorkflowRun.objects.get(pk=conflict.pk).error) is None

    def shown(name):
        body = admin_client.get(reverse(f"admin:pikku_workflows_{name}_changelist")) \
            .content.decode()
        return {run.pk for run in (waiting, legacy, suspended, missing, undeployed, conflict)
                if str(run.pk)[:8] in body}, body

    assert shown("suspendedrun")[0] == {suspended.pk, missing.pk, undeployed.pk,
                                        conflict.pk}
    approvals, body = shown("approvalwaitingrun")
    assert approvals == {waiting.pk, legacy.pk} and "Manager sign-off" in body
    assert "resume_runs" not in body  # no "resume" list action there


def test_the_resume_list_action_skips_runs_waiting_for_approval(admin_client):
    waiting = gated()
    suspended = pw.start_workflow("two_gates", {})
    changelist = reverse("admin:pikku_workflows_workflowrun_changelist")
    selected = {"action": "resume_runs", "_selected_action": [str(waiting.pk),
                                                               str(suspended.pk)]}
    preview = admin_client.post(changelist, selected).content.decode()
    assert "Resume 1 run?" in preview
    assert "1 other in the selection will be skipped" in preview
    admin_client.post(changelist, {**selected, "confirm": "yes"})
    # Resumed: it went on to its next gate.
    assert WorkflowRun.objects.get(pk=suspended.pk).error["message"] == "Awaiting courier"
    waiting.refresh_from_db()
    assert waiting.status == "suspended" and waiting.error["code"] == "WAITING_FOR_APPROVAL"


@pytest.mark.django_db(transaction=True)
def test_migration_0011_recodes_runs_stored_at_a_gate():
    run = as_legacy(gated())
    other = pw.start_workflow("two_gates", {})
    try:
        call_command("migrate", "pikku_workflows", "0010", verbosity=0)
        run.refresh_from_db(fields=["error"])  # columns of 0010 only
        assert run.error["code"] == "WORKFLOW_SUSPENDED"
        call_command("migrate", "pikku_workflows", verbosity=0)
        run.refresh_from_db(fields=["error"])
        assert run.error == {"code": "WAITING_FOR_APPROVAL", "message": "Manager sign-off",
                             "step": GATE}
        assert WorkflowRun.objects.get(pk=other.pk).error["code"] == "WORKFLOW_SUSPENDED"
        call_command("migrate", "pikku_workflows", "0010", verbosity=0)
        run.refresh_from_db(fields=["error"])
        assert run.error["code"] == "WORKFLOW_SUSPENDED"  # reversible
    finally:
        call_command("migrate", "pikku_workflows", verbosity=0)


def test_the_steps_table_says_what_a_gates_time_is(admin_client):
    run = gated(expiry="3d")
    _, body = _tools(admin_client, run)
    steps = body[body.index('id="pk-steps"'):body.index("<h2>Data</h2>")]
    assert " · expires " in steps and " · wakes " not in steps
    assert "Approve or reject" in body
    pw.approve_step(run.pk, "Manager sign-off", {"approved": True})
    _, body = _tools(admin_client, run)
    steps = body[body.index('id="pk-steps"'):body.index("<h2>Data</h2>")]
    assert " · expires " not in steps  # decided: its expiry no longer matters


def test_the_steps_table_shows_a_retry_as_retrying(admin_client):
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})
    WorkflowRun.objects.filter(pk=run.pk).update(status="running", output=None)
    WorkflowStep.objects.filter(run=run).update(
        status="failed", attempt_count=1, error={"message": "transient"},
        wake_at=timezone.now() + timedelta(seconds=30))
    _, body = _tools(admin_client, run)
    step = body[body.index('<details class="pk-step"'):body.index("<h2>Data</h2>")]
    assert 'class="pk-pill pk-retrying"' in step and " · retrying at " in step
    assert 'class="pk-pill pk-failed"' not in step
