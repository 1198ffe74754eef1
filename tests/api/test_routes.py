"""Every route of the REST API as the owner, another user, staff and an anonymous client."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings
from rest_framework import serializers

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from tests.testapp.shared import CALLS

from .conftest import API, client_for

pytestmark = pytest.mark.django_db

DENIED = (401, 403)


def started(client, name, data=None, **body):
    response = client.post(f"{API}workflows/{name}/start/", {"data": data, **body},
                           format="json")
    assert response.status_code == 202, response.content
    return WorkflowRun.objects.get(pk=response.json()["id"])


# --- workflows ---------------------------------------------------------------------------


def test_workflows_list_and_detail(owner, anonymous):
    listed = owner.get(f"{API}workflows/").json()
    names = [w["name"] for w in listed]
    assert names == sorted(names) and "sequential" in names and "user_onboarding" in names
    entry = next(w for w in listed if w["name"] == "user_onboarding")
    assert set(entry) == {"name", "source", "description", "tags", "graph_hash",
                          "version_status"} and entry["source"] == "graph"
    detail = owner.get(f"{API}workflows/sequential/").json()
    assert detail["graph"]["nodes"] and detail["graph"]["edges"]
    assert [s["step_name"] for s in detail["planned_steps"]] == ["Add", "Double"]
    assert owner.get(f"{API}workflows/nope/").status_code == 404
    assert anonymous.get(f"{API}workflows/").status_code in DENIED
    assert anonymous.get(f"{API}workflows/sequential/").status_code in DENIED


def test_start_records_the_owner_and_answers_202(owner, users):
    response = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}}, format="json")
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"id", "status"} and body["status"] == "completed"  # inline executor
    run = WorkflowRun.objects.get(pk=body["id"])
    assert run.owner == users["owner"] and run.wire == {"type": "http"}


def test_start_with_an_idempotency_key_returns_the_same_run(owner):
    first = started(owner, "sequential", {"x": 1}, idempotency_key="order-7")
    again = owner.post(f"{API}workflows/sequential/start/",
                       {"data": {"x": 1}, "idempotency_key": "order-7"}, format="json")
    assert again.status_code == 200 and again.json()["id"] == str(first.pk)
    assert len(CALLS["add"]) == 1


def test_run_answers_with_the_output_or_why_not(owner):
    done = owner.post(f"{API}workflows/sequential/run/", {"data": {"x": 2}}, format="json")
    assert done.status_code == 200
    assert done.json()["output"] == {"total": 3, "doubled": 6} and done.json()["status"] == \
        "completed"
    failed = owner.post(f"{API}workflows/retrying/run/",
                        {"data": {"fail_times": 5, "retries": 0}}, format="json")
    assert failed.status_code == 422
    assert failed.json()["code"] == "STEP_FAILED" and "transient failure" in \
        failed.json()["detail"] and failed.json()["status"] == "failed"
    cancelled = owner.post(f"{API}workflows/cancels_itself/run/", {"data": {"cancel": True}},
                           format="json")
    assert cancelled.status_code == 409 and cancelled.json()["code"] == "WORKFLOW_CANCELLED"
    suspended = owner.post(f"{API}workflows/two_gates/run/", {"data": {}}, format="json")
    assert suspended.status_code == 409 and suspended.json()["code"] == "WORKFLOW_SUSPENDED"


def test_input_serializer_errors_are_400_with_field_errors(owner):
    class OrderInput(serializers.Serializer):
        amount = serializers.IntegerField(min_value=1)

    with registry.isolated():
        @pw.workflow(name="validated_order", input_serializer=OrderInput)
        def validated_order(wf, data):
            return data["amount"]

        bad = owner.post(f"{API}workflows/validated_order/start/", {"data": {"amount": "x"}},
                         format="json")
        good = owner.post(f"{API}workflows/validated_order/run/", {"data": {"amount": 3}},
                          format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_INPUT"
    assert "amount" in bad.json()["errors"]
    assert good.status_code == 200 and good.json()["output"] == 3
    assert WorkflowRun.objects.count() == 1  # nothing written for the bad input


# --- bad bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "content_type", "field"), [
    ("{bad json", "application/json", None),
    ('{"data": 1, "colour": "red"}', "application/json", "colour"),
    ('{"data": 1, "idempotency_key": ""}', "application/json", "idempotency_key"),
    ('{"data": 1, "idempotency_key": "' + "k" * 201 + '"}', "application/json",
     "idempotency_key"),
    ("[1, 2]", "application/json", "non_field_errors"),
    ("\xff\xfe", "application/json", None),
])
def test_bad_bodies_are_400_naming_the_field_and_write_nothing(owner, body, content_type,
                                                                field):
    response = owner.post(f"{API}workflows/sequential/start/", body,
                          content_type=content_type)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["detail"] and data["code"]
    if field:
        assert field in data["errors"]
    assert not WorkflowRun.objects.exists()


def test_bodies_over_max_input_bytes_are_413_before_parsing(owner):
    with override_settings(PIKKU_WORKFLOWS={"MAX_INPUT_BYTES": 200}):
        big = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": "y" * 300}},
                         format="json")
        run = started(owner, "two_gates", {})
        resume = owner.post(f"{API}runs/{run.pk}/resume/", {"data": "z" * 300}, format="json")
        bad = owner.post(f"{API}workflows/sequential/start/", "{" + " " * 300,
                         content_type="application/json")
    assert big.status_code == 413 and big.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert resume.status_code == 413 and bad.status_code == 413
    assert WorkflowRun.objects.count() == 1
    assert WorkflowRun.objects.get().status == "suspended"


def test_wrong_types_are_400(owner):
    run = started(owner, "two_gates", {})
    response = owner.post(f"{API}runs/{run.pk}/cancel/", {"reason": {"not": "text"}},
                          format="json")
    assert response.status_code == 400 and "reason" in response.json()["errors"]
    assert owner.get(f"{API}runs/?owner=abc").status_code == 400
    assert owner.get(f"{API}runs/?created_after=yesterday").status_code == 400


def test_no_error_answer_carries_a_trace_or_sql(owner):
    answers = [
        owner.post(f"{API}workflows/sequential/start/", "{", content_type="application/json"),
        owner.get(f"{API}runs/00000000-0000-0000-0000-000000000000/"),
        owner.get(f"{API}runs/%27%20OR%201=1--/"),
        owner.post(f"{API}workflows/returns_a_set_flow/start/", {}, format="json"),
    ]
    for answer in answers:
        text = answer.content.decode()
        assert answer.status_code < 500
        assert "Traceback" not in text and "SELECT" not in text and "SECRET" not in text


# --- runs ----------------------------------------------------------------------------------


def test_run_detail_is_get_run_status(owner, other, staff, anonymous):
    run = started(owner, "retrying", {"fail_times": 1, "retries": 2})
    url = f"{API}runs/{run.pk}/"
    detail = owner.get(url).json()
    assert detail == pw.get_run_status(run.pk)
    assert set(detail) == {"id", "workflow", "status", "input", "output", "error", "owner",
                           "parent_run", "graph_hash", "inline", "created_at", "updated_at",
                           "finished_at", "steps"}
    [step] = detail["steps"]
    assert set(step) == {"name", "label", "kind", "status", "attempts", "rpc_name",
                         "duration_ms", "branch_taken", "child_run"} and step["attempts"] == 2
    assert staff.get(url).status_code == 200
    assert other.get(url).status_code == 404
    assert anonymous.get(url).status_code in DENIED


def test_malformed_and_unknown_run_ids_are_404(owner):
    for run_id in ("not-a-uuid", "00000000-0000-0000-0000-000000000000", "1"):
        for suffix in ("", "steps/", "history/", "timeline/", "stream/", "state/"):
            response = owner.get(f"{API}runs/{run_id}/{suffix}")
            assert response.status_code == 404, (run_id, suffix)
            assert response.json()["code"] == "NOT_FOUND"


def results(client, url):
    """The ``results`` of a paginated route, after checking the envelope."""
    response = client.get(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"count", "count_is_estimate", "next", "previous", "results"}
    assert body["count_is_estimate"] is False and body["count"] == len(body["results"])
    return body["results"]


def test_steps_history_and_timeline(owner, other):
    run = started(owner, "retrying", {"fail_times": 2, "retries": 3})
    steps = results(owner, f"{API}runs/{run.pk}/steps/")
    assert [s["name"] for s in steps] == ["Flaky"]
    assert set(steps[0]) == {"name", "label", "kind", "status", "rpc_name", "data", "result",
                             "error",
                             "attempts", "branch_taken", "child_run", "from_step_name",
                             "created_at", "updated_at"}
    assert steps[0]["attempts"] == 3 and steps[0]["data"] == {"fail_times": 2}
    history = results(owner, f"{API}runs/{run.pk}/history/")
    assert [(h["step"], h["attempt"], h["status"]) for h in history] == [
        ("Flaky", 1, "failed"), ("Flaky", 2, "failed"), ("Flaky", 3, "succeeded")]
    assert history[0]["error"]["message"] == "transient failure on attempt 1"
    assert "traceback" not in str(history).lower()
    timeline = results(owner, f"{API}runs/{run.pk}/timeline/")
    assert [e["at"] for e in timeline] == sorted(e["at"] for e in timeline)
    assert [e["event"] for e in timeline if e["event"] in ("failed", "succeeded")] == [
        "failed", "failed", "succeeded"]
    assert [e["error"]["message"] for e in timeline if e["event"] == "failed"] == [
        "transient failure on attempt 1", "transient failure on attempt 2"]
    assert all("error" not in e for e in timeline if e["event"] != "failed")
    for suffix in ("steps/", "history/", "timeline/"):
        assert other.get(f"{API}runs/{run.pk}/{suffix}").status_code == 404


def test_list_shows_owners_their_runs_and_staff_all(owner, other, staff, anonymous, users):
    mine = started(owner, "sequential", {"x": 1})
    theirs = started(other, "sequential", {"x": 2})
    assert [r["id"] for r in owner.get(f"{API}runs/").json()["results"]] == [str(mine.pk)]
    assert [r["id"] for r in other.get(f"{API}runs/").json()["results"]] == [str(theirs.pk)]
    everything = staff.get(f"{API}runs/").json()
    assert everything["count"] == 2
    assert [r["id"] for r in everything["results"]] == [str(theirs.pk), str(mine.pk)]
    assert set(everything["results"][0]) == {
        "id", "workflow", "status", "error", "owner", "parent_run", "graph_hash", "inline",
        "created_at", "updated_at", "finished_at"}
    assert anonymous.get(f"{API}runs/").status_code in DENIED
    # Another user's id in the owner filter finds nothing of theirs.
    assert owner.get(f"{API}runs/?owner={users['other'].pk}").json()["count"] == 0


def test_resume_cancel_retry_and_delete_need_ownership(owner, other, staff):
    gated = started(owner, "two_gates", {})
    for verb, body in (("resume", {"data": 1}), ("cancel", {"reason": "x"}), ("retry", {})):
        assert other.post(f"{API}runs/{gated.pk}/{verb}/", body,
                          format="json").status_code == 404
    assert other.delete(f"{API}runs/{gated.pk}/").status_code == 404
    resumed = owner.post(f"{API}runs/{gated.pk}/resume/", {"data": {"dock": 4}}, format="json")
    assert resumed.status_code == 200 and resumed.json()["status"] == "suspended"  # 2nd gate
    assert WorkflowStep.objects.get(run=gated, step_name="Between").status == "succeeded"
    cancelled = staff.post(f"{API}runs/{gated.pk}/cancel/", {"reason": "no courier"},
                           format="json")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["error"] == {"message": "no courier", "code": "WORKFLOW_CANCELLED"}
    assert owner.delete(f"{API}runs/{gated.pk}/").status_code == 204
    assert not WorkflowRun.objects.filter(pk=gated.pk).exists()
    assert not WorkflowStep.objects.filter(run_id=gated.pk).exists()


def test_wrong_states_are_409(owner):
    done = started(owner, "sequential", {"x": 1})
    live = started(owner, "two_gates", {})
    for verb, run in (("resume", done), ("cancel", done), ("retry", done), ("retry", live)):
        response = owner.post(f"{API}runs/{run.pk}/{verb}/", {}, format="json")
        assert response.status_code == 409 and response.json()["code"] == "INVALID_RUN_STATE"
    deleting = owner.delete(f"{API}runs/{live.pk}/")
    assert deleting.status_code == 409 and WorkflowRun.objects.filter(pk=live.pk).exists()


def test_retry_a_failed_run(owner):
    run = started(owner, "retrying", {"fail_times": 2, "retries": 0})
    assert run.status == "failed"
    retried = owner.post(f"{API}runs/{run.pk}/retry/", {}, format="json")
    assert retried.status_code == 200 and retried.json()["status"] == "failed"
    again = owner.post(f"{API}runs/{run.pk}/retry/", {}, format="json")
    assert again.json()["status"] == "completed"
    assert StepAttempt.objects.filter(step__run=run).count() == 3


def test_approve_follows_the_gates_policy(owner, other, users):
    run = started(owner, "needs_approval", {"approvers": "not-initiator"})
    body = {"reason": "Manager sign-off", "decision": {"ok": 1}}
    assert other.post(f"{API}runs/{run.pk}/approve/", body, format="json").status_code == 404
    refused = owner.post(f"{API}runs/{run.pk}/approve/", body, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "APPROVAL_FORBIDDEN"
    users["other"].user_permissions.add(Permission.objects.get(codename="approve_workflowrun"))
    approver = client_for(type(users["other"]).objects.get(pk=users["other"].pk))
    decided = approver.post(f"{API}runs/{run.pk}/approve/", body, format="json")
    assert decided.status_code == 200 and decided.json()["status"] == "decided"
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    settled = approver.post(f"{API}runs/{run.pk}/approve/", body, format="json")
    assert settled.status_code == 409
    # Approving reads nothing more: the approver still cannot see the run.
    assert approver.get(f"{API}runs/{run.pk}/").status_code == 404
    two = started(owner, "two_gates", {})
    not_a_gate = approver.post(f"{API}runs/{two.pk}/approve/",
                               {"reason": "Awaiting warehouse", "decision": 1}, format="json")
    assert not_a_gate.status_code == 400 and not_a_gate.json()["code"] == "UNKNOWN_GATE"


def test_approve_body_is_validated(owner):
    run = started(owner, "needs_approval", {})
    response = owner.post(f"{API}runs/{run.pk}/approve/", {"decision": 1}, format="json")
    assert response.status_code == 400 and "reason" in response.json()["errors"]


def test_api_permission_classes_setting(anonymous):
    allow_any = {"API_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"]}
    pw.start_workflow("sequential", {"x": 1})  # ownerless
    with override_settings(PIKKU_WORKFLOWS=allow_any):
        assert anonymous.get(f"{API}workflows/").status_code == 200
        assert anonymous.get(f"{API}runs/").json()["count"] == 0  # still nobody's runs
