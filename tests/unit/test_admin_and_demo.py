"""The admin pages render for staff and stay read-only; the demo seeds and runs."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    return pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})


def test_run_pages_render(admin_client, run):
    changelist = admin_client.get(reverse("admin:pikku_workflows_workflowrun_changelist"))
    assert changelist.status_code == 200
    assert str(run.pk) in changelist.content.decode()
    page = admin_client.get(reverse("admin:pikku_workflows_workflowrun_change", args=[run.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    # The step succeeded on its second attempt; the first attempt's error is in its history.
    assert "Flaky" in body and "<td>transient failure on attempt 1</td>" in body
    assert "&quot;attempt&quot;: 2" in body  # the output, as readable JSON


def test_run_admin_is_read_only(admin_client, run):
    assert admin_client.get(reverse("admin:pikku_workflows_workflowrun_add")).status_code == 403
    # Rows change only through the engine's operations: the run page has no form to edit.
    page = admin_client.post(reverse("admin:pikku_workflows_workflowrun_change", args=[run.pk]),
                             {"status": "failed", "workflow": "x"})
    assert page.status_code == 200 and WorkflowRun.objects.get(pk=run.pk).status == "completed"
    live = pw.start_workflow("two_gates", {})
    delete = reverse("admin:pikku_workflows_workflowrun_delete", args=[live.pk])
    assert admin_client.post(delete, {}).status_code == 302
    assert WorkflowRun.objects.filter(pk=live.pk).exists()  # a live run is never deleted


def test_version_pages_render(admin_client):
    version = WorkflowVersion.objects.create(
        workflow="sequential", graph_hash="abc123abc123", source="dsl", graph={}
    )
    url = reverse("admin:pikku_workflows_workflowversion_changelist")
    assert admin_client.get(url).status_code == 200
    url = reverse("admin:pikku_workflows_workflowversion_change", args=[version.pk])
    assert admin_client.get(url).status_code == 200


def test_admin_requires_staff(client, django_user_model, run):
    user = django_user_model.objects.create_user("visitor", password="pw")
    client.force_login(user)
    response = client.get(reverse("admin:pikku_workflows_workflowrun_changelist"))
    assert response.status_code == 302


def test_demo_seed_runs_the_demo_workflows():
    out = StringIO()
    call_command("demo_seed", stdout=out)
    text = out.getvalue()
    statuses = [line.split(": ")[-1] for line in text.splitlines()
                if line.startswith(("order_saga ", "team_onboarding "))]
    assert statuses == ["completed", "suspended", "failed", "suspended", "completed",
                        "completed"], text
    declined = WorkflowRun.objects.get(workflow="order_saga", status="failed")
    assert declined.steps.get(step_name="Charge").attempt_count == 4
    assert declined.steps.filter(step_name="Charge:onError", status="succeeded").count() == 1
    waiting = WorkflowRun.objects.get(workflow="order_saga", status="suspended",
                                      error__code="WAITING_FOR_APPROVAL")
    assert waiting.error["step"] == "__workflow_approval:Manager sign-off"
    paying = WorkflowRun.objects.get(workflow="order_saga", status="suspended",
                                     error__code="WAITING_FOR_EVENT")
    assert (paying.error["event"], paying.error["key"]) == ("payment.succeeded", "order-10")
    child = WorkflowRun.objects.get(workflow="create_invoice")
    assert child.parent_run.output["invoice"] == {"invoice": "INV-00008", "total": 40}


def test_pikku_start_command(capsys):
    call_command("pikku_start", "sequential", '{"x": 1}', "--wait")
    assert '"doubled": 4' in capsys.readouterr().out
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("pikku_start", "sequential", "{oops")
    with pytest.raises(CommandError, match="no workflow"):
        call_command("pikku_start", "missing")


def test_pikku_graph_command(capsys):
    import json

    call_command("pikku_graph", "user_onboarding")
    graph = json.loads(capsys.readouterr().out)
    assert {n["id"] for n in graph["nodes"]} >= {"$start", "review", "activate", "$end"}
    run = pw.start_workflow("branching", {"amount": 500})
    call_command("pikku_graph", "branching", "--run", str(run.pk), "--format", "mermaid")
    text = capsys.readouterr().out
    assert text.startswith("flowchart TD") and "succeeded" in text and "-->" in text
    with pytest.raises(CommandError, match="run of 'branching'"):
        call_command("pikku_graph", "sequential", "--run", str(run.pk))
    with pytest.raises(CommandError, match="no workflow"):
        call_command("pikku_graph", "nope")


def test_pikku_prune_deletes_old_finished_runs(capsys):
    from datetime import timedelta

    from django.utils import timezone

    old = pw.start_workflow("sequential", {"x": 1})
    recent = pw.start_workflow("sequential", {"x": 2})
    suspended = pw.start_workflow("two_gates", {})
    WorkflowRun.objects.filter(pk__in=[old.pk, suspended.pk]).update(
        finished_at=timezone.now() - timedelta(days=40))
    call_command("pikku_prune", "--older-than", "30d", "--dry-run")
    assert "1 run(s) would be deleted" in capsys.readouterr().out
    call_command("pikku_prune", "--older-than", "30d", "--batch-size", "1")
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {recent.pk, suspended.pk}
    with pytest.raises(CommandError, match="older-than"):
        call_command("pikku_prune", "--older-than", "ages")


def test_the_demo_nightly_report_schedule_ticks_every_minute():
    from datetime import UTC, datetime

    from pikku_workflows.models import WorkflowSchedule, WorkflowScheduleTick
    from pikku_workflows.testing import fake_clock, run_scheduler

    with fake_clock(datetime(2030, 1, 7, 2, 59, 30, tzinfo=UTC)) as clock:
        run_scheduler()  # syncs the demo's declaration
        schedule = WorkflowSchedule.objects.get(name="nightly-report")
        assert (schedule.workflow, schedule.every, schedule.source) == (
            "nightly_report", 60.0, "code")
        clock.advance("1min")
    tick = WorkflowScheduleTick.objects.get(schedule=schedule)
    assert tick.tick_at == datetime(2030, 1, 7, 3, 0, tzinfo=UTC) and tick.status == "started"
    assert tick.run.status == "completed"
    assert tick.run.output == {"sent_to": "owner@example.com", "orders": 25 % 7}
