"""``POST runs/{id}/fork/``: rerun a finished run from a step, as the owner, another user,
an operator with and without ``fork_workflowrun``, and an anonymous client."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.run_audit import run_audit
from tests.unit.workflows_forks import FLAGS

from .conftest import API

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fork_flags")]


def failed(owner_user):
    run = pw.start_workflow("fork_orders", {}, owner=owner_user)
    assert run.status == "failed"
    return run


def counts():
    return (WorkflowRun.objects.count(), WorkflowStep.objects.count(),
            StepAttempt.objects.count())


def test_the_owner_forks_a_failed_run(owner, users):
    source = failed(users["owner"])
    FLAGS["fixed"] = True
    response = owner.post(f"{API}runs/{source.pk}/fork/", {"reason": "fixed"}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == {"id", "status"} and body["status"] == "completed"
    fork = WorkflowRun.objects.get(pk=body["id"])
    assert response["Location"].endswith(f"{API}runs/{fork.pk}/")
    assert (fork.forked_from_id, fork.fork_step, fork.fork_reason) == (
        source.pk, "Charge", "fixed")
    assert (fork.owner_id, fork.forked_by_id) == (users["owner"].pk, users["owner"].pk)
    assert fork.wire == {"type": "http"}
    # The fork is the owner's own run: readable like the others.
    assert owner.get(f"{API}runs/{fork.pk}/").json()["status"] == "completed"
    # The audits: a rerun on the source, the start on the fork.
    rerun = [e for e in run_audit(source) if e.what == "rerun"]
    assert len(rerun) == 1 and rerun[0].via == "API" and str(fork.pk) in rerun[0].reason
    start = run_audit(WorkflowRun.objects.get(pk=fork.pk))[0]
    assert (start.what, start.who) == ("started", "owner")
    assert str(source.pk) in start.reason and "'Charge'" in start.reason


def test_from_step_and_input(owner, users):
    source = failed(users["owner"])
    response = owner.post(f"{API}runs/{source.pk}/fork/",
                          {"from_step": "Price", "input": {"ok": True}}, format="json")
    assert response.status_code == 202 and response.json()["status"] == "completed"
    fork = WorkflowRun.objects.get(pk=response.json()["id"])
    assert fork.input == {"ok": True} and fork.fork_step == "Price"


def test_gates_are_named_as_the_steps_route_names_them(owner, users):
    source = pw.start_workflow("fork_gated", {}, owner=users["owner"])
    pw.approve_step(source.pk, "Sign-off", {"approved": True})
    names = [s["name"] for s in owner.get(f"{API}runs/{source.pk}/steps/").json()["results"]]
    assert "approval:Sign-off" in names
    response = owner.post(f"{API}runs/{source.pk}/fork/", {"from_step": "approval:Sign-off"},
                          format="json")
    assert response.status_code == 202 and response.json()["status"] == "suspended"


def test_refusals_are_409_and_400_and_write_nothing(owner, users):
    source = failed(users["owner"])
    live = pw.start_workflow("two_gates", {}, owner=users["owner"])
    FLAGS.update(fixed=True, renamed=True)
    before = counts()
    diverges = owner.post(f"{API}runs/{source.pk}/fork/", {}, format="json")
    assert diverges.status_code == 409
    assert diverges.json()["code"] == "FORK_DIVERGES" and "Price v2" in diverges.json()["detail"]
    unknown = owner.post(f"{API}runs/{source.pk}/fork/", {"from_step": "Nope"}, format="json")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "FORK_UNKNOWN_STEP")
    not_done = owner.post(f"{API}runs/{live.pk}/fork/", {}, format="json")
    assert (not_done.status_code, not_done.json()["code"]) == (409, "FORK_NOT_TERMINAL")
    for body in ({"reason": "x" * 1001}, {"from_step": 3}, {"extra": 1}, {"reason": "a\x07"}):
        assert owner.post(f"{API}runs/{source.pk}/fork/", body,
                          format="json").status_code == 400, body
    assert counts() == before
    assert not LogEntry.objects.exists()


def test_anonymous_and_other_users_may_not_fork(anonymous, other, staff, users):
    source = failed(users["owner"])
    FLAGS["fixed"] = True
    before = counts()
    assert anonymous.post(f"{API}runs/{source.pk}/fork/", {},
                          format="json").status_code in (401, 403)
    # Another user does not see the run; an operator sees it, without fork_workflowrun.
    assert other.post(f"{API}runs/{source.pk}/fork/", {}, format="json").status_code == 404
    refused = staff.post(f"{API}runs/{source.pk}/fork/", {}, format="json")
    assert refused.status_code == 403 and "fork_workflowrun" in refused.json()["detail"]
    assert counts() == before
    users["staff"].user_permissions.add(Permission.objects.get(codename="fork_workflowrun"))
    staff.force_authenticate(type(users["staff"]).objects.get(pk=users["staff"].pk))
    allowed = staff.post(f"{API}runs/{source.pk}/fork/", {}, format="json")
    assert allowed.status_code == 202
    fork = WorkflowRun.objects.get(pk=allowed.json()["id"])
    # The operator asked; the fork stays the owner's.
    assert (fork.owner_id, fork.forked_by_id) == (users["owner"].pk, users["staff"].pk)
