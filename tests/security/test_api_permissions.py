"""Who may do what through the REST API: Django's model permissions decide, for staff and
non-staff alike (docs/api.md, "Who sees what"); owners keep their rights on their own runs.

Also the regressions of issue 22: approve answers the decision only, never the run; a
reason that names no gate writes nothing; engine state keys cannot be written; idempotency
keys are scoped per owner.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.conftest import API, client_for, runs_in_each_state

pytestmark = pytest.mark.django_db

CARD = "4242424242424242"
ACTIONS = ("resume", "cancel", "retry", "approve", "delete")


def with_permissions(django_user_model, name: str, *codenames: str, **flags):
    user = django_user_model.objects.create_user(name, password="pw", **flags)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    return django_user_model.objects.get(pk=user.pk)  # a fresh permission cache


# --- the matrix ------------------------------------------------------------------------------

#: caller -> (is_staff, permissions held)
CALLERS = {
    "staff without permissions": (True, ()),
    "non-staff viewer": (False, ("view_workflowrun",)),
    "staff viewer": (True, ("view_workflowrun",)),
    **{f"staff with {verb}_workflowrun only": (True, (f"{verb}_workflowrun",))
       for verb in ACTIONS},
    **{f"staff viewer with {verb}_workflowrun": (True, ("view_workflowrun", f"{verb}_workflowrun"))
       for verb in ACTIONS},
}


def expected(permissions: tuple[str, ...], route: str) -> int:
    """What a caller holding ``permissions`` gets on another user's run."""
    viewer = "view_workflowrun" in permissions
    if route == "approve":
        if "approve_workflowrun" in permissions:
            return 200
        return 403 if viewer else 404
    if route == "messages":  # sending a message to a run steers it, as resuming does
        if not viewer:
            return 404
        return 202 if "resume_workflowrun" in permissions else 403
    if route in ("resume", "cancel", "retry", "delete"):
        if not viewer:
            return 404
        return (204 if route == "delete" else 200) \
            if f"{route}_workflowrun" in permissions else 403
    return 200 if viewer else 404


def routes(runs):
    s, g, f, d = (runs[k].pk for k in ("suspended", "gated", "failed", "done"))
    return {
        "detail": ("get", f"{API}runs/{d}/", None),
        "steps": ("get", f"{API}runs/{d}/steps/", None),
        "history": ("get", f"{API}runs/{d}/history/", None),
        "timeline": ("get", f"{API}runs/{d}/timeline/", None),
        "stream": ("get", f"{API}runs/{d}/stream/", None),
        "state": ("get", f"{API}runs/{d}/state/", None),
        # Before resume/ and cancel/, which move the suspended run on or end it.
        "messages": ("post", f"{API}runs/{s}/messages/", {"topic": "dock", "data": 4}),
        "resume": ("post", f"{API}runs/{s}/resume/", {"data": {"dock": 4}}),
        "cancel": ("post", f"{API}runs/{s}/cancel/", {"reason": "ops"}),
        "retry": ("post", f"{API}runs/{f}/retry/", {}),
        "approve": ("post", f"{API}runs/{g}/approve/",
                    {"reason": "Manager sign-off", "decision": {"ok": True}}),
        "delete": ("delete", f"{API}runs/{d}/", None),
    }


def call(client, method, url, body):
    if method == "post":
        return client.post(url, body, format="json")
    # A stream's status is known before its first event, which is never read here.
    return getattr(client, method)(url)


@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_model_permissions_decide_on_others_runs(django_user_model, users, caller):
    is_staff, permissions = CALLERS[caller]
    user = with_permissions(django_user_model, "caller", *permissions, is_staff=is_staff)
    client = client_for(user)
    for route, (method, url, body) in routes(runs_in_each_state(users["owner"])).items():
        response = call(client, method, url, body)
        assert response.status_code == expected(permissions, route), (
            caller, route, response.status_code, getattr(response, "content", b""))
        if response.status_code in (403, 404):
            assert response.json()["code"]
    listed = client.get(f"{API}runs/").json()["count"]
    assert listed == (WorkflowRun.objects.count() if "view_workflowrun" in permissions else 0)


def success(route: str) -> int:
    return {"delete": 204, "messages": 202}.get(route, 200)


def test_owners_may_do_everything_to_their_own_runs_without_any_permission(users, owner):
    for route, (method, url, body) in routes(runs_in_each_state(users["owner"])).items():
        response = call(owner, method, url, body)
        assert response.status_code == success(route), (route, response)


def test_a_superuser_may_do_everything(django_user_model, users):
    root = django_user_model.objects.create_superuser("root", password="pw")
    client = client_for(root)
    for route, (method, url, body) in routes(runs_in_each_state(users["owner"])).items():
        response = call(client, method, url, body)
        assert response.status_code == success(route), (route, response)


def test_anonymous_is_refused(anonymous, users):
    for route, (method, url, body) in routes(runs_in_each_state(users["owner"])).items():
        response = call(anonymous, method, url, body)
        assert response.status_code in (401, 403), route


def test_a_refused_action_changes_nothing(django_user_model, users, unchanged):
    viewer = client_for(with_permissions(django_user_model, "viewer", "view_workflowrun",
                                         is_staff=True))
    runs = runs_in_each_state(users["owner"])
    check = unchanged()
    for route, (method, url, body) in routes(runs).items():
        if method != "get":
            assert call(viewer, method, url, body).status_code == 403, route
    check()


# --- approve answers the decision, for gates that exist --------------------------------------


@pytest.fixture
def approver(django_user_model):
    return client_for(with_permissions(django_user_model, "approver", "approve_workflowrun"))


def test_approve_answers_the_decision_only_never_the_runs_data(users, owner, approver):
    for client in (approver, owner):
        run = pw.start_workflow("needs_approval", {"card": CARD}, owner=users["owner"])
        response = client.post(f"{API}runs/{run.pk}/approve/",
                               {"reason": "Manager sign-off", "decision": {"ok": True}},
                               format="json")
        assert response.status_code == 200
        assert response.json() == {"run": str(run.pk), "step": "approval:Manager sign-off",
                                   "status": "decided", "decision": {"ok": True}}
        assert CARD not in response.content.decode()
        assert WorkflowRun.objects.get(pk=run.pk).status == "completed"


def test_approve_says_when_a_decision_waits_for_the_gate(users, owner):
    run = pw.start_workflow("gate_after_suspend", {}, owner=users["owner"])
    early = owner.post(f"{API}runs/{run.pk}/approve/",
                       {"reason": "Finance sign-off", "decision": "yes"}, format="json")
    assert early.status_code == 200 and early.json()["status"] == "recorded"
    pw.resume_run(run.pk)
    assert WorkflowRun.objects.get(pk=run.pk).output["data"] == "yes"


def test_a_decision_the_gates_serializer_refuses_is_answered_rejected(users, owner):
    run = pw.start_workflow("needs_approval", {"validate": True}, owner=users["owner"])
    response = owner.post(f"{API}runs/{run.pk}/approve/",
                          {"reason": "Manager sign-off", "decision": {"approved": "perhaps"}},
                          format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "rejected" and "approved" in body["errors"]


@pytest.mark.parametrize(("workflow", "reason"), [
    ("needs_approval", "Manager signoff"),          # a typo
    ("two_gates", "Awaiting warehouse"),            # a wf.suspend reason, not an approval
    ("gate_named_at_run_time", "Sign-off by ada"),  # built at run time, not reached yet
])
def test_a_reason_that_names_no_gate_is_400_and_writes_nothing(
        users, owner, approver, unchanged, workflow, reason):
    run = pw.start_workflow(workflow, {"who": "ada"}, owner=users["owner"])
    check = unchanged()
    answer = owner.post(f"{API}runs/{run.pk}/approve/", {"reason": reason, "decision": 1},
                        format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "UNKNOWN_GATE"
    gates = {"needs_approval": ["Manager sign-off"], "two_gates": [],
             "gate_named_at_run_time": []}[workflow]
    assert answer.json()["gates"] == gates  # the owner may read the run
    blind = approver.post(f"{API}runs/{run.pk}/approve/", {"reason": reason, "decision": 1},
                          format="json")
    assert blind.status_code == 400 and "gates" not in blind.json()
    assert "Manager sign-off" not in blind.json()["detail"]
    check()


def test_a_gate_named_at_run_time_can_be_answered_once_reached(users, owner):
    run = pw.start_workflow("gate_named_at_run_time", {"who": "ada"}, owner=users["owner"])
    pw.resume_run(run.pk)
    answer = owner.post(f"{API}runs/{run.pk}/approve/",
                        {"reason": "Sign-off by ada", "decision": 1}, format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "decided"


def test_the_python_api_refuses_an_unknown_gate_too(users):
    run = pw.start_workflow("two_gates", {})
    with pytest.raises(pw.WorkflowUnknownGateError, match="no approval gate 'Awaiting warehouse'"):
        pw.approve_step(run.pk, "Awaiting warehouse", 1)
    assert WorkflowRun.objects.get(pk=run.pk).state == {}


@pytest.mark.parametrize("key", ["__approval_5f5f", "__workflow_suspend:x", "__anything"])
def test_engine_state_keys_cannot_be_written_by_a_workflow(key):
    run = pw.start_workflow("writes_state", {"key": key, "value": {"decision": 1}})
    assert run.status == "failed" and "reserved" in run.error["message"]
    assert run.state == {}


# --- idempotency keys are scoped per (workflow, owner) ----------------------------------------


def test_another_users_key_never_returns_their_run(users, owner, other):
    body = {"data": {"x": 1}, "idempotency_key": "order-7"}
    first = owner.post(f"{API}workflows/sequential/start/", body, format="json")
    bobs = other.post(f"{API}workflows/sequential/start/", body, format="json")
    assert first.status_code == bobs.status_code == 202
    assert first.json()["id"] != bobs.json()["id"]
    assert WorkflowRun.objects.filter(idempotency_key="order-7").count() == 2
    assert WorkflowRun.objects.get(pk=bobs.json()["id"]).owner_id == users["other"].pk


def test_a_replayed_start_answers_200_with_the_replay_header(owner):
    body = {"data": {"x": 1}, "idempotency_key": "order-7"}
    first = owner.post(f"{API}workflows/sequential/start/", body, format="json")
    again = owner.post(f"{API}workflows/sequential/start/", body, format="json")
    assert first.status_code == 202 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]


def test_a_key_reused_with_other_input_is_409(owner, unchanged):
    owner.post(f"{API}workflows/sequential/start/",
               {"data": {"x": 1}, "idempotency_key": "order-7"}, format="json")
    check = unchanged()
    reused = owner.post(f"{API}workflows/sequential/start/",
                        {"data": {"x": 2}, "idempotency_key": "order-7"}, format="json")
    assert reused.status_code == 409 and reused.json()["code"] == "IDEMPOTENCY_CONFLICT"
    check()


def test_the_idempotency_key_header(owner):
    first = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}}, format="json",
                       headers={"Idempotency-Key": "hdr-1"})
    again = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}}, format="json",
                       headers={"Idempotency-Key": "hdr-1"})
    assert first.status_code == 202 and again.status_code == 200
    assert WorkflowRun.objects.get(pk=first.json()["id"]).idempotency_key == "hdr-1"
    both = owner.post(f"{API}workflows/sequential/start/",
                      {"data": {"x": 1}, "idempotency_key": "other"}, format="json",
                      headers={"Idempotency-Key": "hdr-1"})
    assert both.status_code == 400 and both.json()["code"] == "INVALID"


def test_the_python_api_scopes_keys_per_owner(users):
    system = pw.start_workflow("sequential", {"x": 1}, idempotency_key="k")
    alice = pw.start_workflow("sequential", {"x": 1}, owner=users["owner"], idempotency_key="k")
    bob = pw.start_workflow("sequential", {"x": 1}, owner=users["other"], idempotency_key="k")
    assert len({system.pk, alice.pk, bob.pk}) == 3
    assert pw.start_workflow("sequential", {"x": 1}, idempotency_key="k").pk == system.pk
    with pytest.raises(pw.WorkflowIdempotencyError) as raised:
        pw.start_workflow("sequential", {"x": 9}, owner=users["owner"], idempotency_key="k")
    assert raised.value.code == "IDEMPOTENCY_CONFLICT" and raised.value.http_status == 409


def test_start_answers_the_location_of_the_run(owner):
    response = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}},
                          format="json")
    assert response.headers["Location"].endswith(f"{API}runs/{response.json()['id']}/")


def test_start_takes_a_start_node(owner):
    started = owner.post(f"{API}workflows/two_doors/start/",
                         {"data": {"via": "api"}, "start_node": "api"}, format="json")
    assert started.status_code == 202
    run = WorkflowRun.objects.get(pk=started.json()["id"])
    assert set(run.steps.values_list("step_name", flat=True)) == {"api", "done"}
    refused = owner.post(f"{API}workflows/two_doors/start/",
                         {"data": {}, "start_node": "done"}, format="json")
    assert refused.status_code == 400 and "entry node" in json.dumps(refused.json())


def test_an_anonymous_start_may_not_use_an_idempotency_key(anonymous):
    """Under AllowAny, anonymous runs have no owner: a key would share the system scope
    of the runs code starts, and replay their ids."""
    pw.start_workflow("sequential", {"x": 1}, idempotency_key="nightly")  # the system's
    allow_any = {"API_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"]}
    with override_settings(PIKKU_WORKFLOWS=allow_any):
        keyed = anonymous.post(f"{API}workflows/sequential/start/",
                               {"data": {"x": 1}, "idempotency_key": "nightly"}, format="json")
        assert keyed.status_code == 400 and "signed-in" in json.dumps(keyed.json())
        plain = anonymous.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}},
                               format="json")
        assert plain.status_code == 202
    assert WorkflowRun.objects.filter(idempotency_key="nightly").count() == 1
