"""What machine clients and integrators get: the approvals inbox, ETags on the run detail."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

import pikku_workflows as pw
from pikku_workflows.testing import fake_clock
from tests.conftest import API, client_for

pytestmark = pytest.mark.django_db


def approver_client(user, *codenames):
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    return client_for(type(user).objects.get(pk=user.pk))


def inbox(client):
    response = client.get(f"{API}approvals/")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_inbox_lists_the_gates_a_user_may_answer_and_nothing_of_the_run(users, owner, other):
    mine = pw.start_workflow("needs_approval", {"card": "4242", "validate": True},
                             owner=users["owner"])
    four_eyes = pw.start_workflow("needs_approval", {"approvers": "not-initiator"},
                                  owner=users["owner"])
    pw.start_workflow("two_gates", {}, owner=users["owner"])  # a suspend is no approval
    listed = inbox(owner)
    assert listed["count"] == 1  # four eyes: not the initiator's to answer
    (gate,) = listed["results"]
    assert gate["run"] == str(mine.pk) and gate["workflow"] == "needs_approval"
    assert gate["step"] == "approval:Manager sign-off" and gate["reason"] == "Manager sign-off"
    assert gate["expires_at"] is None and gate["approvers"] == "any"
    assert {f["name"]: (f["type"], f["required"]) for f in gate["fields"]} == {
        "approved": ("boolean", True), "note": ("string", False)}
    assert "4242" not in str(listed)
    assert inbox(other)["count"] == 0  # others' runs are not theirs to answer
    approver = approver_client(users["other"], "approve_workflowrun")
    assert {g["run"] for g in inbox(approver)["results"]} == {str(mine.pk), str(four_eyes.pk)}
    # Answering takes a gate off the list.
    approver.post(f"{API}runs/{four_eyes.pk}/approve/",
                  {"reason": "Manager sign-off", "decision": 1}, format="json")
    assert {g["run"] for g in inbox(approver)["results"]} == {str(mine.pk)}


def test_the_inbox_follows_the_gates_permission_and_expiry(users):
    with fake_clock() as clock:
        needs = pw.start_workflow("needs_approval", {
            "permission": "pikku_workflows.cancel_workflowrun", "expiry": "1h"})
        approver = approver_client(users["other"], "approve_workflowrun")
        assert inbox(approver)["count"] == 0
        both = approver_client(users["other"], "approve_workflowrun", "cancel_workflowrun")
        (gate,) = inbox(both)["results"]
        assert gate["run"] == str(needs.pk) and gate["expires_at"] is not None
        clock.advance(3601)
        assert inbox(both)["count"] == 0


def test_a_poller_gets_304_while_the_run_is_unchanged(users, owner):
    run = pw.start_workflow("two_gates", {}, owner=users["owner"])
    first = owner.get(f"{API}runs/{run.pk}/")
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith('W/"')
    same = owner.get(f"{API}runs/{run.pk}/", headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.headers["ETag"] == etag and not same.content
    pw.resume_run(run.pk, {"dock": 4})
    changed = owner.get(f"{API}runs/{run.pk}/", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    assert changed.json()["status"] == "suspended"


def test_services_authenticate_with_a_token_and_others_get_a_challenge(users):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    run = pw.start_workflow("sequential", {"x": 1}, owner=users["owner"])
    token = Token.objects.create(user=users["owner"])
    client = APIClient()
    answer = client.get(f"{API}runs/{run.pk}/", headers={"Authorization": f"Token {token.key}"})
    assert answer.status_code == 200 and answer.json()["id"] == str(run.pk)
    for headers in ({}, {"Authorization": "Token not-a-key"}):
        refused = client.get(f"{API}runs/", headers=headers)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Token"
        assert refused.json()["code"] in ("NOT_AUTHENTICATED", "AUTHENTICATION_FAILED")


def test_timestamps_render_in_the_projects_time_zone(users, owner, settings):
    settings.TIME_ZONE = "Europe/Paris"
    run = pw.start_workflow("sequential", {"x": 1}, owner=users["owner"])
    offsets = set()
    for url in (f"{API}runs/{run.pk}/", f"{API}runs/", f"{API}runs/{run.pk}/steps/",
                f"{API}runs/{run.pk}/history/", f"{API}runs/{run.pk}/timeline/"):
        body = owner.get(url).json()
        rows = body.get("results", [body])
        for row in rows:
            for key, value in row.items():
                if (key.endswith("_at") and value) or key == "at":
                    offsets.add(value[-6:])
    assert offsets == {"+01:00"} or offsets == {"+02:00"}  # CET or CEST, one only
