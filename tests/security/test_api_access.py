"""Who may do what through the REST API (docs/api.md, "Who sees what"), what no request
can make the server run, and what error answers never show.

Already covered in tests/unit/api (not repeated): another user's run is 404 on detail, steps,
history, timeline and stream; resume/cancel/retry/delete by another user answer 404; the
list shows owners their own runs; approve follows the gate's policy.
The gaps tested here: every route for every kind of caller *and* the database unchanged
afterwards, the approver permission not widening anything but approve, and error bodies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.conftest import API, client_for, runs_in_each_state
from tests.testapp.shared import CALLS

pytestmark = pytest.mark.django_db

DENIED = (401, 403)


@pytest.fixture
def runs(users):
    """User "owner"'s runs, one for each route's applicable state."""
    return runs_in_each_state(users["owner"])


def every_run_route(runs):
    """(method, url, body) for every route about one run, on a run it applies to."""
    s, g, f, d = (runs[k].pk for k in ("suspended", "gated", "failed", "done"))
    return [
        ("get", f"{API}runs/{d}/", None),
        ("get", f"{API}runs/{d}/steps/", None),
        ("get", f"{API}runs/{d}/history/", None),
        ("get", f"{API}runs/{d}/timeline/", None),
        ("get", f"{API}runs/{d}/stream/", None),
        ("get", f"{API}runs/{d}/state/", None),
        ("post", f"{API}runs/{s}/messages/", {"topic": "dock", "data": 4}),
        ("post", f"{API}runs/{s}/resume/", {"data": {"dock": 4}}),
        ("post", f"{API}runs/{s}/cancel/", {"reason": "not mine"}),
        ("post", f"{API}runs/{f}/retry/", {}),
        ("post", f"{API}runs/{g}/approve/", {"reason": "Manager sign-off",
                                             "decision": {"ok": True}}),
        ("delete", f"{API}runs/{d}/", None),
    ]


def call(client, method, url, body):
    if method == "post":
        return client.post(url, body, format="json")
    return getattr(client, method)(url)


def test_another_user_gets_404_on_every_run_route_and_changes_nothing(other, runs, unchanged):
    check = unchanged()
    for method, url, body in every_run_route(runs):
        response = call(other, method, url, body)
        assert response.status_code == 404, (method, url, response.content)
        assert response.json()["code"] == "NOT_FOUND"
    assert other.get(f"{API}runs/").json()["count"] == 0
    assert other.get(f"{API}runs/?workflow=sequential").json()["count"] == 0
    check()
    assert not CALLS


def test_anonymous_is_refused_everywhere_and_changes_nothing(anonymous, runs, unchanged):
    check = unchanged()
    routes = [
        *every_run_route(runs), ("get", f"{API}runs/", None), ("get", f"{API}workflows/", None),
        ("get", f"{API}workflows/sequential/", None),
        ("post", f"{API}workflows/sequential/start/", {"data": {"x": 1}}),
        ("post", f"{API}workflows/sequential/run/", {"data": {"x": 1}}),
        ("post", f"{API}events/", {"event": "paid"}),
    ]
    for method, url, body in routes:
        response = call(anonymous, method, url, body)
        assert response.status_code in DENIED, (method, url, response.content)
        assert response.json()["code"]
    check()
    assert not CALLS


def test_the_approver_permission_widens_approve_and_nothing_else(users, runs, unchanged):
    """Holders of approve_workflowrun answer others' gates; they still cannot list, read,
    stream, resume, cancel, retry or delete those runs."""
    users["other"].user_permissions.add(Permission.objects.get(codename="approve_workflowrun"))
    approver = client_for(type(users["other"]).objects.get(pk=users["other"].pk))
    check = unchanged()
    for method, url, body in every_run_route(runs):
        if url.endswith("/approve/"):
            continue
        response = call(approver, method, url, body)
        assert response.status_code == 404, (method, url, response.content)
    assert approver.get(f"{API}runs/").json()["count"] == 0
    check()


@pytest.mark.parametrize(("gate", "refusal"), [
    ({"approvers": "owner"}, "only the run's owner"),
    ({"permission": "pikku_workflows.delete_workflowrun"}, "requires the permission"),
])
def test_an_approver_the_gates_policy_refuses_gets_403_and_nothing_is_recorded(
        users, unchanged, gate, refusal):
    run = pw.start_workflow("needs_approval", gate, owner=users["owner"])
    users["other"].user_permissions.add(Permission.objects.get(codename="approve_workflowrun"))
    approver = client_for(type(users["other"]).objects.get(pk=users["other"].pk))
    check = unchanged()
    response = approver.post(f"{API}runs/{run.pk}/approve/",
                             {"reason": "Manager sign-off", "decision": {"ok": True}},
                             format="json")
    assert response.status_code == 403 and response.json()["code"] == "APPROVAL_FORBIDDEN"
    assert refusal in response.json()["detail"]
    check()


def test_a_user_with_no_permission_cannot_approve_a_gate_open_to_any(other, runs, unchanged):
    check = unchanged()
    response = other.post(f"{API}runs/{runs['gated'].pk}/approve/",
                          {"reason": "Manager sign-off", "decision": {"ok": True}},
                          format="json")
    assert response.status_code == 404
    check()


# --- nothing runs what a request names -----------------------------------------------------------


@pytest.mark.parametrize("name", [
    "os.system", "builtins.eval", "tests.security.targets.leave_mark",
    "pikku_workflows.executors.jobs.orchestrate", "pikku_workflows.operations.cancel_run",
    "echo", "add", "..%2F..%2Fadmin", "sequential%00",
])
def test_no_workflow_route_runs_what_is_not_a_registered_workflow(owner, unchanged, name,
                                                                   tmp_path):
    mark = tmp_path / "mark"
    check = unchanged()
    for verb in ("start", "run"):
        response = owner.post(f"{API}workflows/{name}/{verb}/", {"data": str(mark)},
                              format="json")
        assert response.status_code == 404, (name, response.content)
    assert owner.get(f"{API}workflows/{name}/").status_code == 404
    check()
    assert not CALLS and not mark.exists()


@pytest.mark.parametrize("field", ["function", "rpc_name", "workflow", "fn", "callable"])
def test_a_start_body_cannot_name_a_function(owner, unchanged, field):
    check = unchanged()
    response = owner.post(f"{API}workflows/sequential/start/",
                          {"data": {"x": 1}, field: "tests.security.targets.leave_mark"},
                          format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    check()


def test_a_function_named_in_data_is_data(owner, users, tmp_path):
    """A child-run workflow's name taken from the input finds nothing outside the
    registry; resume data naming a function is stored as given, never called."""
    mark = tmp_path / "mark"
    target = "tests.security.targets.leave_mark"
    response = owner.post(f"{API}workflows/parent/start/",
                          {"data": {"child": target, "child_input": str(mark)}},
                          format="json")
    run = WorkflowRun.objects.get(pk=response.json()["id"])
    assert run.status == "suspended" and run.error["code"] == "RPC_NOT_FOUND"
    gated = pw.start_workflow("two_gates", {}, owner=users["owner"])
    resumed = owner.post(f"{API}runs/{gated.pk}/resume/",
                         {"data": {"function": target, "args": [str(mark)]}}, format="json")
    assert resumed.status_code == 200
    assert not mark.exists()


# --- what error answers never show ------------------------------------------------------------

LEAKS = ("Traceback", 'File "', "SELECT", "INSERT", "UPDATE ", "settings", "SETTINGS",
         "PIKKU_WORKFLOWS", "SECRET", "/work/", str(Path(__file__).resolve().parents[3]),
         "site-packages", "psycopg", "sqlite3")


def assert_no_leak(response):
    text = response.content.decode(errors="replace")
    for leak in LEAKS:
        assert leak not in text, (leak, response.status_code, text[:500])


@override_settings(DEBUG=False)
def test_error_answers_show_no_trace_setting_sql_or_path(owner, other, anonymous, runs):
    big = "x" * (1024 * 1024 + 10)
    answers = [
        owner.get(f"{API}nowhere/"),
        owner.get(f"{API}runs/{runs['done'].pk}/nowhere/"),
        owner.put(f"{API}runs/{runs['done'].pk}/", {}, format="json"),
        owner.patch(f"{API}runs/{runs['done'].pk}/", {}, format="json"),
        owner.generic("POST", f"{API}workflows/sequential/start/", "{",
                      content_type="application/json"),
        owner.generic("POST", f"{API}workflows/sequential/start/", b"\xff",
                      content_type="application/json"),
        owner.generic("POST", f"{API}workflows/sequential/start/",
                      '{"data": ' + "[" * 10_000 + "]" * 10_000 + "}",
                      content_type="application/json"),
        owner.generic("POST", f"{API}workflows/sequential/start/", "a=1",
                      content_type="application/x-www-form-urlencoded"),
        owner.post(f"{API}workflows/sequential/start/", {"data": big}, format="json"),
        owner.post(f"{API}workflows/sequential/start/", {"data": "\u0000"}, format="json"),
        owner.post(f"{API}runs/{runs['done'].pk}/cancel/", {}, format="json"),
        owner.post(f"{API}runs/{runs['gated'].pk}/approve/",
                   {"reason": "x" * 5000, "decision": 1}, format="json"),
        owner.get(f"{API}runs/?created_after=%27%3B%20DROP%20TABLE%20x%3B--"),
        owner.get(f"{API}runs/?page=9999"),
        owner.get(f"{API}runs/' OR 1=1 --/"),
        other.get(f"{API}runs/{runs['done'].pk}/"),
        anonymous.get(f"{API}runs/"),
        owner.post(f"{API}workflows/retrying/run/", {"data": {"fail_times": 5, "retries": 0}},
                   format="json"),
        owner.post(f"{API}workflows/raises_itself/run/", {"data": {}}, format="json"),
    ]
    for answer in answers:
        assert 400 <= answer.status_code < 500, (answer.status_code, answer.content[:300])
        assert_no_leak(answer)
    # A failed run's error tells what failed, not where in the code.
    assert json.loads(answers[-1].content)["code"] == "KeyError"


@override_settings(DEBUG=False)
def test_a_misconfigured_server_answers_500_without_naming_its_settings(owner):
    """Server-side errors (invalid PIKKU_WORKFLOWS) used to answer 400 with their message,
    which names the settings and their values."""
    with override_settings(PIKKU_WORKFLOWS={"EXECUTOR": "bogus-secret-executor"}):
        start = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}},
                           format="json")
    with override_settings(PIKKU_WORKFLOWS={"NO_SUCH_SETTING": 1}):
        listing = owner.get(f"{API}runs/")
    for answer in (start, listing):
        assert answer.status_code == 500
        assert answer.json() == {"detail": "A server error occurred.",
                                 "code": "CONFIGURATION_ERROR"}
        assert_no_leak(answer)
        assert "bogus" not in answer.content.decode()
        assert "NO_SUCH_SETTING" not in answer.content.decode()
