"""Every console URL as staff with and without each permission and as a non-staff user;
the operator actions on one run and on every matching run; constant query counts."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.admin import actions
from pikku_workflows.models import WorkflowRun, WorkflowVersion
from tests.conftest import runs_in_each_state

pytestmark = pytest.mark.django_db

LISTS = ["workflowrun", "failedrun", "suspendedrun", "approvalwaitingrun"]
VERBS = ["resume", "cancel", "retry", "approve", "delete"]


def staff_client(django_user_model, name, *codenames):
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client, user


def url(name, *args):
    return reverse(f"admin:pikku_workflows_{name}", args=args)


@pytest.fixture
def runs():
    return runs_in_each_state()


def test_every_page_as_a_superuser(admin_client, runs):
    for name in LISTS:
        assert admin_client.get(url(f"{name}_changelist")).status_code == 200
    assert admin_client.get(url("registeredworkflow_changelist")).status_code == 200
    for run in runs.values():
        page = admin_client.get(url("workflowrun_change", run.pk))
        assert page.status_code == 200
        assert f'data-run-status="{run.status}"' in page.content.decode()
        live = admin_client.get(url("workflowrun_live", run.pk)).json()
        assert live["status"] == run.status and "<svg" in live["graph"]
        for verb in VERBS:
            assert admin_client.get(url(f"workflowrun_{verb}", run.pk)).status_code == 200


def test_triage_lists_show_what_they_name(admin_client, runs):
    def shown(name):
        body = admin_client.get(url(f"{name}_changelist")).content.decode()
        return {key for key, run in runs.items() if str(run.pk)[:8] in body}

    assert shown("failedrun") == {"failed"}
    # DESIGN 1.1: the suspended list holds the runs that need an operator; a run waiting
    # for an approval is in its own list.
    assert shown("suspendedrun") == {"suspended"}
    assert shown("approvalwaitingrun") == {"gated"}
    waiting = admin_client.get(url("approvalwaitingrun_changelist")).content.decode()
    assert "Manager sign-off" in waiting


def test_view_only_staff_sees_pages_but_no_action(django_user_model, runs):
    client, _ = staff_client(django_user_model, "viewer", "view_workflowrun")
    for name in LISTS:
        assert client.get(url(f"{name}_changelist")).status_code == 200
    page = client.get(url("workflowrun_change", runs["failed"].pk)).content.decode()
    assert "pk-tool-retry" not in page
    for verb in VERBS:
        assert client.get(url(f"workflowrun_{verb}", runs["failed"].pk)).status_code == 403
        assert client.post(url(f"workflowrun_{verb}", runs["failed"].pk)).status_code == 403
    assert WorkflowRun.objects.get(pk=runs["failed"].pk).status == "failed"


@pytest.mark.parametrize("verb", VERBS)
def test_each_action_needs_its_own_permission(django_user_model, runs, verb):
    codename = actions.VERBS[verb][0]
    client, _ = staff_client(django_user_model, "operator", "view_workflowrun", codename)
    run = {"resume": runs["suspended"], "cancel": runs["suspended"], "retry": runs["failed"],
           "approve": runs["gated"], "delete": runs["done"]}[verb]
    page = client.get(url("workflowrun_change", run.pk)).content.decode()
    assert f"pk-tool-{verb}" in page
    assert all(f"pk-tool-{other}" not in page for other in VERBS if other != verb)
    assert client.get(url(f"workflowrun_{verb}", run.pk)).status_code == 200


def test_staff_without_view_permission_and_non_staff_are_refused(django_user_model, runs):
    client, _ = staff_client(django_user_model, "nobody")
    assert client.get(url("workflowrun_changelist")).status_code == 403
    assert client.get(url("workflowrun_change", runs["done"].pk)).status_code == 403
    assert client.get(url("workflowrun_live", runs["done"].pk)).status_code == 403
    assert client.get(url("registeredworkflow_changelist")).status_code == 403
    user = django_user_model.objects.create_user("visitor", password="pw")
    visitor = Client()
    visitor.force_login(user)
    for target in (url("workflowrun_changelist"), url("workflowrun_change", runs["done"].pk),
                   url("workflowrun_cancel", runs["suspended"].pk),
                   url("registeredworkflow_changelist")):
        response = visitor.get(target)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_actions_on_one_run_are_performed_messaged_and_logged(admin_client, runs):
    resumed = admin_client.post(url("workflowrun_resume", runs["suspended"].pk),
                                {"payload": '{"dock": 4}'})
    assert resumed.status_code == 302
    run = WorkflowRun.objects.get(pk=runs["suspended"].pk)
    assert run.steps.get(step_name="__workflow_suspend:Awaiting warehouse").result == {"dock": 4}
    bad = admin_client.post(url("workflowrun_resume", runs["suspended"].pk), {"payload": "{"})
    assert bad.status_code == 200 and "Not valid JSON" in bad.content.decode()
    admin_client.post(url("workflowrun_cancel", runs["suspended"].pk), {"reason": "no courier"})
    run.refresh_from_db()
    assert run.status == "cancelled" and run.error["message"] == "no courier"
    admin_client.post(url("workflowrun_retry", runs["failed"].pk), {})
    assert WorkflowRun.objects.get(pk=runs["failed"].pk).steps.get().attempt_count == 2
    admin_client.post(url("workflowrun_approve", runs["gated"].pk),
                      {"decision": '{"ok": true}', "approve": "Approve"})
    assert WorkflowRun.objects.get(pk=runs["gated"].pk).status == "completed"
    admin_client.post(url("workflowrun_delete", runs["done"].pk), {})
    assert not WorkflowRun.objects.filter(pk=runs["done"].pk).exists()
    logged = LogEntry.objects.values_list("change_message", flat=True)
    assert len(logged) == 5
    follow = admin_client.post(url("workflowrun_cancel", run.pk), {}, follow=True)
    assert "Cancel refused" in follow.content.decode()  # already cancelled: a message, no 500


def test_an_approval_form_is_built_from_the_gates_serializer(admin_client):
    run = pw.start_workflow("needs_approval", {"validate": True})
    page = admin_client.get(url("workflowrun_approve", run.pk)).content.decode()
    # The buttons decide "approved"; the serializer's other fields are the form's.
    assert 'name="note"' in page and 'name="approved"' not in page
    assert 'name="decision"' not in page
    admin_client.post(url("workflowrun_approve", run.pk), {"reject": "Reject"})
    run.refresh_from_db()
    assert run.status == "completed" and run.output["data"]["approved"] is False
    approved = pw.start_workflow("needs_approval", {"validate": True})
    admin_client.post(url("workflowrun_approve", approved.pk),
                      {"note": "fine", "approve": "Approve"})
    approved.refresh_from_db()
    assert approved.output["data"] == {"approved": True, "note": "fine"}


def test_approve_with_an_empty_json_box_approves(admin_client):
    run = pw.start_workflow("needs_approval", {})
    admin_client.post(url("workflowrun_approve", run.pk), {"decision": "", "approve": "Approve"})
    run.refresh_from_db()
    assert run.status == "completed" and run.output["data"] == {"approved": True}


def test_four_eyes_a_staff_member_may_not_approve_their_own_run(django_user_model):
    client, user = staff_client(django_user_model, "initiator", "view_workflowrun",
                                "approve_workflowrun")
    run = pw.start_workflow("needs_approval", {"approvers": "not-initiator"}, owner=user)
    page = client.post(url("workflowrun_approve", run.pk), {"decision": "true"}, follow=True)
    assert "Approve refused" in page.content.decode()
    run.refresh_from_db()
    assert run.status == "suspended" and not any(k.startswith("__approval_") for k in run.state)


def test_actions_need_a_csrf_token(django_user_model, runs):
    user = django_user_model.objects.create_superuser("csrf", "c@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(url("workflowrun_cancel", runs["suspended"].pk), {}).status_code == 403
    assert WorkflowRun.objects.get(pk=runs["suspended"].pk).status == "suspended"


def test_a_list_action_applies_to_every_matching_run_in_batches(admin_client, monkeypatch):
    monkeypatch.setattr(actions, "BATCH_SIZE", 2)
    gated = [pw.start_workflow("two_gates", {}) for _ in range(5)]
    done = pw.start_workflow("sequential", {"x": 1})
    changelist = url("workflowrun_changelist") + "?status__exact=suspended"
    body = {"action": "cancel_runs", "select_across": "1", "index": "0",
            "_selected_action": [str(gated[0].pk)]}
    confirm = admin_client.post(changelist, body)
    text = confirm.content.decode()
    assert confirm.status_code == 200 and "Cancel 5 runs?" in text
    assert str(gated[0].pk) in text  # the sample
    done_page = admin_client.post(changelist, {**body, "confirm": "yes"}, follow=True)
    assert "5 run(s) cancelled" in done_page.content.decode()
    assert set(WorkflowRun.objects.filter(workflow="two_gates").values_list(
        "status", flat=True)) == {"cancelled"}
    assert WorkflowRun.objects.get(pk=done.pk).status == "completed"
    assert LogEntry.objects.count() == 5


def test_list_and_run_page_cost_the_same_queries_at_two_sizes(admin_client):
    def count(target):
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(target).status_code == 200
        return len(captured)

    first = pw.start_workflow("fan_out", {"numbers": [1, 2]})
    pw.start_workflow("retrying", {"fail_times": 5, "retries": 0})
    pw.start_workflow("needs_approval", {})
    small = [count(url(f"{name}_changelist")) for name in LISTS]
    page_small = count(url("workflowrun_change", first.pk))
    for _ in range(30):
        pw.start_workflow("retrying", {"fail_times": 5, "retries": 1})
    big = pw.start_workflow("fan_out", {"numbers": list(range(80))})
    assert [count(url(f"{name}_changelist")) for name in LISTS] == small
    assert count(url("workflowrun_change", big.pk)) == page_small


def test_search_by_id_prefix_and_workflow(admin_client, runs):
    target = runs["failed"]
    body = admin_client.get(url("workflowrun_changelist") + f"?q={str(target.pk)[:6]}")
    assert str(target.pk)[:8] in body.content.decode()
    body = admin_client.get(url("workflowrun_changelist") + "?q=two_gates").content.decode()
    assert str(runs["suspended"].pk)[:8] in body and str(target.pk)[:8] not in body


def test_the_workflows_page_starts_runs_and_sets_version_status(django_user_model):
    client, _ = staff_client(django_user_model, "starter", "view_workflowrun",
                             "start_workflowrun")
    page = client.get(url("registeredworkflow_changelist")).content.decode()
    assert "user_onboarding" in page and "<svg" in page and 'name="input"' in page
    started = client.post(url("registeredworkflow_changelist"),
                          {"workflow": "sequential", "input": '{"x": 2}'})
    run = WorkflowRun.objects.get()
    assert started.status_code == 302 and run.output == {"total": 3, "doubled": 6}
    bad = client.post(url("registeredworkflow_changelist"),
                      {"workflow": "sequential", "input": "{nope"}, follow=True)
    assert "Not started" in bad.content.decode() and WorkflowRun.objects.count() == 1
    version = WorkflowVersion.objects.get(workflow="sequential")
    refused = client.post(url("registeredworkflow_changelist"),
                          {"version": version.pk, "status": "declined"})
    assert refused.status_code == 403
    editor, _ = staff_client(django_user_model, "editor", "view_workflowrun",
                             "change_workflowversion")
    editor.post(url("registeredworkflow_changelist"), {"version": version.pk,
                                                       "status": "declined"})
    assert WorkflowVersion.objects.get(pk=version.pk).status == "declined"


def test_the_worker_banner_when_runs_go_to_rq_and_no_worker_is_seen(admin_client, settings):
    list_url = url("workflowrun_changelist")
    assert "pk-banner" not in admin_client.get(list_url).content.decode()  # inline executor
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    body = admin_client.get(list_url).content.decode()
    assert "pk-banner" in body and "Redis cannot be reached" in body
