"""The console (/admin/pikku_workflows/...): who may open which page and perform which
action, CSRF on every action, and bad input to its forms.

Already covered in tests/unit/admin/test_console.py (not repeated): view-only staff see no
action; each action's own permission shows its button and opens its form; staff without
the view permission and non-staff are refused on a few pages; cancel needs a CSRF token.
The gaps tested here: *every* console URL (enumerated from the admin site, so a page added
later is covered too), an action's permission not granting another one, CSRF on every
action, list action and form, and the forms' bad input; each with the database unchanged.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.admin import actions
from pikku_workflows.models import WorkflowEvent, WorkflowRun, WorkflowVersion
from tests.conftest import runs_in_each_state
from tests.console_urls import console_url_names

from .conftest import nested

pytestmark = pytest.mark.django_db

VERBS = list(actions.VERBS)


@pytest.fixture
def runs():
    made = runs_in_each_state()
    # An event for the events admin's pages (a run's id would be no event's).
    pw.send_event("payment.succeeded", {"amount": 1}, key="order-1")
    return made


def target(runs, verb):
    return {"resume": runs["suspended"], "cancel": runs["suspended"], "retry": runs["failed"],
            "approve": runs["gated"], "delete": runs["done"], "fork": runs["failed"]}[verb]


def staff_client(django_user_model, name, *codenames, csrf=False):
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def console_urls(runs):
    """Every URL of the console: each pikku_workflows admin URL pattern, with a run's id
    (or a version's) where it takes one."""
    version = WorkflowVersion.objects.first()
    event = WorkflowEvent.objects.first()
    urls = console_url_names(admin.site)
    assert len(urls) > 20, urls  # the run admins' pages and actions, versions, workflows
    found = []
    for name in urls:
        object_id = str(version.pk) if "workflowversion" in name else str(
            event.pk) if "workflowevent" in name else str(runs["gated"].pk)
        for args in ((), (object_id,)):
            try:
                found.append(reverse(f"admin:{name}", args=args))
                break
            except Exception:  # this name takes other arguments
                continue
    return sorted(set(found))


def test_every_console_url_refuses_non_staff_and_anonymous(django_user_model, runs,
                                                           unchanged):
    user = django_user_model.objects.create_user("visitor", password="pw")
    visitor = Client()
    visitor.force_login(user)
    check = unchanged()
    urls = console_urls(runs)
    for client in (visitor, Client()):
        for url in urls:
            for method in ("get", "post"):
                response = getattr(client, method)(url)
                assert response.status_code == 302, (method, url, response.status_code)
                assert "/login/" in response["Location"]
    check()
    assert WorkflowRun.objects.filter(status="cancelled").count() == 0


def test_every_console_url_refuses_staff_without_permissions(django_user_model, runs,
                                                             unchanged):
    client = staff_client(django_user_model, "nobody")
    check = unchanged()
    for url in console_urls(runs):
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            # Refused before any lookup: a redirect for unknown ids would tell which exist.
            assert response.status_code == 403, (method, url, response.status_code)
    check()


@pytest.mark.parametrize("granted", VERBS)
def test_one_actions_permission_grants_no_other_action(django_user_model, runs, unchanged,
                                                       granted):
    client = staff_client(django_user_model, "operator", "view_workflowrun",
                          actions.VERBS[granted][0])
    check = unchanged()
    for verb in VERBS:
        if verb == granted:
            continue
        url = reverse(f"admin:pikku_workflows_workflowrun_{verb}", args=[target(runs, verb).pk])
        body = {"payload": "1", "reason": "x", "decision": "true", "approve": "Approve"}
        assert client.get(url).status_code == 403, (granted, verb)
        assert client.post(url, body).status_code == 403, (granted, verb)
    check()


@pytest.mark.parametrize("verb", VERBS)
def test_every_action_needs_a_csrf_token(django_user_model, runs, unchanged, verb):
    user = django_user_model.objects.create_superuser(f"csrf-{verb}", "c@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    check = unchanged()
    url = reverse(f"admin:pikku_workflows_workflowrun_{verb}", args=[target(runs, verb).pk])
    response = client.post(url, {"payload": "1", "reason": "x", "decision": "true",
                                 "approve": "Approve"})
    assert response.status_code == 403
    check()


@pytest.mark.parametrize("action", ["cancel_runs", "retry_runs", "resume_runs", "fork_runs",
                                    "delete_runs"])
def test_list_actions_need_a_csrf_token_and_their_permission(django_user_model, runs,
                                                             unchanged, action):
    user = django_user_model.objects.create_superuser(f"csrf-{action}", "c@example.com", "pw")
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(user)
    viewer = staff_client(django_user_model, "viewer", "view_workflowrun")
    url = reverse("admin:pikku_workflows_workflowrun_changelist")
    body = {"action": action, "select_across": "1", "index": "0", "confirm": "yes",
            "_selected_action": [str(run.pk) for run in runs.values()]}
    check = unchanged()
    assert csrf_client.post(url, body).status_code == 403
    refused = viewer.post(url, body, follow=True)
    assert refused.status_code in (200, 403)
    check()


def test_the_workflows_page_needs_its_permissions_and_a_csrf_token(django_user_model,
                                                                   unchanged):
    url = reverse("admin:pikku_workflows_registeredworkflow_changelist")
    viewer = staff_client(django_user_model, "viewer", "view_workflowrun")
    starter = staff_client(django_user_model, "starter", "view_workflowrun",
                           "start_workflowrun", "change_workflowversion", csrf=True)
    version = WorkflowVersion.objects.create(workflow="sequential", graph_hash="abc",
                                             graph={}, source="dsl")
    check = unchanged()
    assert viewer.post(url, {"workflow": "sequential", "input": '{"x": 1}'}).status_code == 403
    assert viewer.post(url, {"version": version.pk, "status": "declined"}).status_code == 403
    assert starter.post(url, {"workflow": "sequential", "input": '{"x": 1}'}).status_code == 403
    assert starter.post(url, {"version": version.pk, "status": "declined"}).status_code == 403
    check()
    version.refresh_from_db()
    assert version.status != "declined"


# --- bad input to the console's forms ----------------------------------------------------------


#: The send forms of the console (DESIGN 8.2): (url name, takes a run, body).
SENDS = [("workflowrun_send_event", True, {"event": "payment.succeeded", "key": "order-1"}),
         ("workflowrun_send_message", True, {"topic": "default", "payload": "1"}),
         ("workflowevent_send", False, {"event": "payment.succeeded", "key": "order-1"})]


@pytest.mark.parametrize(("name", "takes_run", "body"), SENDS)
def test_every_send_form_needs_a_csrf_token(django_user_model, runs, unchanged, name,
                                            takes_run, body):
    user = django_user_model.objects.create_superuser(f"csrf-{name}", "c@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    check = unchanged()
    url = reverse(f"admin:pikku_workflows_{name}",
                  args=[runs["suspended"].pk] if takes_run else [])
    assert client.post(url, body).status_code == 403
    check()


# resume_workflowrun sends messages (the message's permission): not in the list.
@pytest.mark.parametrize("granted", [*(v for v in VERBS if v != "resume"),
                                     "change_workflowevent", "delete_workflowevent"])
def test_no_other_permission_sends_an_event_or_a_message_to_anothers_run(
        django_user_model, runs, unchanged, granted):
    codename = actions.VERBS[granted][0] if granted in actions.VERBS else granted
    client = staff_client(django_user_model, "operator", "view_workflowrun",
                          "view_workflowevent", codename)
    check = unchanged()
    for name, takes_run, body in SENDS:
        url = reverse(f"admin:pikku_workflows_{name}",
                      args=[runs["suspended"].pk] if takes_run else [])
        assert client.get(url).status_code == 403, (granted, name)
        assert client.post(url, body).status_code == 403, (granted, name)
    check()


@pytest.mark.parametrize("body", [
    {"event": "a\u0000b"}, {"event": "payment.succeeded", "key": "a\u0000b"},
    {"event": "payment.succeeded", "payload": "[" * 10_000 + "]" * 10_000},
    {"event": "payment.succeeded", "payload": '"\\u0000"'},
    {"event": "payment.succeeded", "payload": "{"},
    {"event": "x" * 256}, {"event": " "},
    {"event": "payment.succeeded", "idempotency_key": "k" * 256},
])
def test_bad_input_to_the_send_forms_changes_nothing(admin_client, runs, unchanged, body):
    check = unchanged()
    for url in (reverse("admin:pikku_workflows_workflowrun_send_event",
                        args=[runs["suspended"].pk]),
                reverse("admin:pikku_workflows_workflowevent_send")):
        response = admin_client.post(url, body, follow=True)
        assert response.status_code == 200, (url, body)
        page = response.content.decode()
        assert "errorlist" in page or "refused" in page, (url, body)
    # The same bad value in the message form (a bad key as its topic).
    message = {"topic": body.get("key", body["event"]), "payload": body.get("payload", "1"),
               "idempotency_key": body.get("idempotency_key", "")}
    response = admin_client.post(reverse("admin:pikku_workflows_workflowrun_send_message",
                                         args=[runs["suspended"].pk]), message, follow=True)
    assert response.status_code == 200
    check()


def test_bad_input_to_the_workflows_page_is_a_message_not_a_500(admin_client, unchanged):
    url = reverse("admin:pikku_workflows_registeredworkflow_changelist")
    check = unchanged()
    for body in (
        {"workflow": "sequential", "input": "[" * 10_000 + "]" * 10_000},
        {"workflow": "sequential", "input": '{"x": "\\u0000"}'},
        {"workflow": "sequential", "input": "{"},
        {"workflow": "os.system", "input": '"touch /tmp/x"'},
        {"workflow": "tests.security.targets.leave_mark", "input": "null"},
        {"version": "abc", "status": "declined"},
        {"version": "\u00b2", "status": "declined"},
        {"version": "99999999999999999999999", "status": "declined"},
        {"version": "1", "status": "<script>"},
    ):
        response = admin_client.post(url, body, follow=True)
        assert response.status_code == 200, (body, response.status_code)
        text = response.content.decode()
        assert "Not started" in text or "Unknown version or status" in text, body
    check()


@pytest.mark.parametrize(("verb", "field"), [
    ("resume", "payload"), ("approve", "decision"),
])
@pytest.mark.parametrize("text", [
    "[" * 10_000 + "]" * 10_000,
    "{",
    '"\\u0000"',
    None,  # nested past the storable depth, but parsable
])
def test_bad_json_in_the_action_forms_changes_nothing(admin_client, runs, unchanged, verb,
                                                      field, text):
    if text is None:
        import json

        text = json.dumps(nested(150))
    url = reverse(f"admin:pikku_workflows_workflowrun_{verb}", args=[target(runs, verb).pk])
    check = unchanged()
    response = admin_client.post(url, {field: text, "approve": "Approve"}, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "errorlist" in page or "refused" in page
    check()


@pytest.mark.parametrize("reason", ["a\u0000b", "\u001b[2J", "x" * 1001])
def test_bad_cancel_reasons_in_the_console_change_nothing(admin_client, runs, unchanged,
                                                          reason):
    url = reverse("admin:pikku_workflows_workflowrun_cancel", args=[runs["suspended"].pk])
    check = unchanged()
    response = admin_client.post(url, {"reason": reason}, follow=True)
    assert response.status_code == 200
    check()


@pytest.mark.parametrize("query", [
    "q=%00", "q=" + "f" * 40, "owner=\u00b2", "q=" + "x" * 5000, "workflow=%00", "owner=%00",
    "owner=99999999999999999999999", "status=%00", "created_at__gte=%00", "o=%00",
    "p=-1", "p=abc", "waiting=%00", "waiting=" + "x" * 5000,
])
def test_bad_list_queries_in_the_console_are_never_a_500(admin_client, runs, query):
    for name in ("workflowrun", "failedrun", "suspendedrun", "approvalwaitingrun",
                 "workflowversion", "workflowevent"):
        response = admin_client.get(
            reverse(f"admin:pikku_workflows_{name}_changelist") + "?" + query)
        assert response.status_code in (200, 302, 400, 404), (name, query)
    page = admin_client.get(reverse("admin:pikku_workflows_workflowrun_change",
                                    args=[runs["done"].pk]) + "?steps=%00")
    assert page.status_code == 200
