"""``POST events/``, ``POST runs/{id}/messages/`` and ``GET runs/{id}/state/``: who may
send and read, what they answer, idempotent replays and conflicts, limits that write
nothing, and a send that wakes a waiting run (the inline executor: in the request)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowEvent, WorkflowMessage, WorkflowRun
from pikku_workflows.run_audit import run_audit

from .conftest import API, client_for

pytestmark = pytest.mark.django_db

EVENTS = f"{API}events/"
DENIED = (401, 403)


def with_permissions(django_user_model, name, *codenames, **flags):
    user = django_user_model.objects.create_user(name, password="pw", **flags)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    return django_user_model.objects.get(pk=user.pk)  # a fresh permission cache


@pytest.fixture
def sender(django_user_model):
    """A signed-in user (not staff) holding only ``add_workflowevent``."""
    return client_for(with_permissions(django_user_model, "sender", "add_workflowevent"))


def waiting_for_payment(owner, order="order-8", **data):
    run = pw.start_workflow("api_awaits_payment", {"order": order, **data}, owner=owner)
    run.refresh_from_db()
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_EVENT"
    return run


def reading_notes(owner):
    run = pw.start_workflow("api_reads_notes", {}, owner=owner)
    run.refresh_from_db()
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_MESSAGE"
    return run


def messages_url(run):
    return f"{API}runs/{run.pk}/messages/"


# --- POST events/ ------------------------------------------------------------------------


def test_who_may_send_an_event(users, anonymous, owner, other, staff, sender,
                               django_user_model):
    body = {"event": "payment.succeeded", "key": "order-8", "data": {"amount": 12}}
    assert anonymous.post(EVENTS, body, format="json").status_code in DENIED
    # Owning runs, or staff status, grants nothing: the model permission decides.
    plain_staff = client_for(with_permissions(django_user_model, "plain", is_staff=True))
    for client in (owner, other, plain_staff):
        refused = client.post(EVENTS, body, format="json")
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            "To send an event you need the permission 'pikku_workflows.add_workflowevent'.")
    assert not WorkflowEvent.objects.exists()
    for client in (sender, staff):  # staff holds it as an operator (tests/conftest.py)
        sent = client.post(EVENTS, body, format="json")
        assert sent.status_code == 202, sent.content
    events = list(WorkflowEvent.objects.order_by("id"))
    assert [(e.event, e.key, e.data) for e in events] == [
        ("payment.succeeded", "order-8", {"amount": 12})] * 2
    assert [e.sent_by.username for e in events] == ["sender", "staff"]


def test_an_event_wakes_the_waiting_run_in_the_request_and_its_state_shows_it(
        users, owner, sender):
    run = waiting_for_payment(users["owner"])
    elsewhere = waiting_for_payment(users["owner"], order="order-9")
    sent = sender.post(EVENTS, {"event": "payment.succeeded", "key": "order-8",
                                "data": {"amount": 12}}, format="json")
    assert sent.status_code == 202
    event = WorkflowEvent.objects.get()
    assert sent.json() == {"id": event.pk, "woken": 1}
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"paid": {"amount": 12}}
    assert owner.get(f"{API}runs/{run.pk}/state/").json() == {
        "paid": {"amount": 12}, "order": "order-8"}
    elsewhere.refresh_from_db()
    assert elsewhere.status == "suspended"  # another key: not woken
    # Without a key, the event is for runs waiting without one: none here.
    unkeyed = sender.post(EVENTS, {"event": "payment.succeeded"}, format="json")
    assert unkeyed.status_code == 202 and unkeyed.json()["woken"] == 0
    assert WorkflowEvent.objects.get(pk=unkeyed.json()["id"]).key is None


def test_the_steps_name_wait_steps_by_their_kind(users, owner, sender):
    run = waiting_for_payment(users["owner"])
    notes = reading_notes(users["owner"])
    sender.post(EVENTS, {"event": "payment.succeeded", "key": "order-8"}, format="json")
    owner.post(messages_url(notes), {"topic": "notes", "data": 1}, format="json")
    for waiting_run, step, kind in ((run, "Payment", "event"), (notes, "First", "message")):
        base = f"{API}runs/{waiting_run.pk}/"
        steps = {s["name"]: s["kind"] for s in owner.get(base + "steps/").json()["results"]}
        assert steps[step] == kind, steps
        detail = {s["name"]: s["kind"] for s in owner.get(base).json()["steps"]}
        assert detail[step] == kind, detail


def test_an_event_sent_again_with_its_idempotency_key_is_replayed(users, sender):
    body = {"event": "payment.succeeded", "key": "order-8", "data": {"amount": 12},
            "idempotency_key": "stripe-evt-1"}
    first = sender.post(EVENTS, body, format="json")
    assert first.status_code == 202 and "Idempotent-Replayed" not in first
    again = sender.post(EVENTS, body, format="json")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json() == {"id": first.json()["id"], "woken": 0}
    # The header is the same key.
    header = {k: v for k, v in body.items() if k != "idempotency_key"}
    by_header = sender.post(EVENTS, header, format="json",
                            HTTP_IDEMPOTENCY_KEY="stripe-evt-1")
    assert by_header.status_code == 200 and by_header.json()["id"] == first.json()["id"]
    assert WorkflowEvent.objects.count() == 1
    # A run created after the first send is not woken by a replay of it.
    run = waiting_for_payment(users["owner"])
    assert sender.post(EVENTS, body, format="json").json()["woken"] == 0
    run.refresh_from_db()
    assert run.status == "suspended"


def test_an_idempotency_key_with_other_content_is_a_conflict(sender):
    body = {"event": "payment.succeeded", "key": "order-8", "data": {"amount": 12},
            "idempotency_key": "stripe-evt-1"}
    assert sender.post(EVENTS, body, format="json").status_code == 202
    for change in ({"data": {"amount": 13}}, {"key": "order-9"}, {"event": "payment.failed"}):
        conflict = sender.post(EVENTS, {**body, **change}, format="json")
        assert conflict.status_code == 409, change
        assert conflict.json()["code"] == "IDEMPOTENCY_CONFLICT"
    differ = sender.post(EVENTS, body, format="json", HTTP_IDEMPOTENCY_KEY="another")
    assert differ.status_code == 400 and "idempotency_key" in differ.json()["errors"]
    assert WorkflowEvent.objects.count() == 1


@pytest.mark.parametrize(("body", "field"), [
    ({}, "event"),
    ({"event": ""}, "event"),
    ({"event": "e" * 256}, "event"),
    ({"event": "paid\n"}, "event"),
    ({"event": 12}, "event"),
    ({"event": "paid", "key": "k" * 256}, "key"),
    ({"event": "paid", "key": ""}, "key"),
    ({"event": "paid", "idempotency_key": "i" * 256}, "idempotency_key"),
    ({"event": "paid", "topic": "default"}, "topic"),
])
def test_an_invalid_event_is_refused_naming_the_field_and_writes_nothing(sender, body, field):
    refused = sender.post(EVENTS, body, format="json")
    assert refused.status_code == 400, refused.content
    assert refused.json()["code"] == "INVALID" and field in refused.json()["errors"]
    assert not WorkflowEvent.objects.exists()


def test_the_longest_names_are_taken(users, sender):
    sent = sender.post(EVENTS, {"event": "e" * 255, "key": "k" * 255,
                                "idempotency_key": "i" * 255}, format="json")
    assert sent.status_code == 202
    assert WorkflowEvent.objects.get().key == "k" * 255


def test_a_body_over_max_input_bytes_is_refused_and_writes_nothing(users, sender, owner):
    run = reading_notes(users["owner"])
    with override_settings(PIKKU_WORKFLOWS={"MAX_INPUT_BYTES": 200}):
        big = {"blob": "x" * 300}
        assert sender.post(EVENTS, {"event": "paid", "data": big},
                           format="json").status_code == 413
        assert owner.post(messages_url(run), {"data": big}, format="json").status_code == 413
    assert not WorkflowEvent.objects.exists() and not WorkflowMessage.objects.exists()


def test_events_takes_no_other_method(sender):
    assert sender.get(EVENTS).status_code == 405
    assert sender.post(f"{API}events", {"event": "paid"}, format="json").status_code == 202
    assert sender.get(f"{API}events/12/").status_code == 404


# --- POST runs/{id}/messages/ ------------------------------------------------------------


def test_who_may_send_a_message(users, anonymous, other, staff, django_user_model):
    run = reading_notes(users["owner"])
    url, body = messages_url(run), {"topic": "notes", "data": "hello"}
    assert anonymous.post(url, body, format="json").status_code in DENIED
    assert other.post(url, body, format="json").status_code == 404  # not theirs to see
    viewer = client_for(with_permissions(django_user_model, "viewer", "view_workflowrun",
                                         "add_workflowevent", is_staff=True))
    refused = viewer.post(url, body, format="json")
    assert refused.status_code == 403
    assert "pikku_workflows.resume_workflowrun" in refused.json()["detail"]
    assert not WorkflowMessage.objects.exists()
    sent = staff.post(url, body, format="json")  # view_ and resume_workflowrun
    assert sent.status_code == 202
    message = WorkflowMessage.objects.get()
    assert sent.json() == {"id": message.pk, "woken": 1}
    assert (message.run_id, message.topic, message.data, message.sent_by) == (
        run.pk, "notes", "hello", users["staff"])


def test_the_owner_sends_messages_that_the_run_receives_in_order(users, owner):
    run = reading_notes(users["owner"])
    first = owner.post(messages_url(run), {"topic": "notes", "data": 1}, format="json")
    assert first.status_code == 202 and first.json()["woken"] == 1
    run.refresh_from_db()
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_MESSAGE"
    # Another topic is not what the run reads: it waits on.
    aside = owner.post(messages_url(run), {"data": "aside"}, format="json")
    assert aside.status_code == 202 and aside.json()["woken"] == 0
    assert WorkflowMessage.objects.get(pk=aside.json()["id"]).topic == "default"
    second = owner.post(messages_url(run), {"topic": "notes", "data": 2}, format="json")
    assert second.status_code == 202
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"notes": [1, 2]}
    assert owner.get(f"{API}runs/{run.pk}/state/").json() == {}


def test_a_message_sent_through_the_api_is_in_the_runs_audit(users, owner, staff):
    run = reading_notes(users["owner"])
    first = owner.post(messages_url(run), {"topic": "notes", "data": {"n": 1}}, format="json")
    replay = staff.post(messages_url(run), {"topic": "notes", "data": {"n": 1}}, format="json",
                        HTTP_IDEMPOTENCY_KEY="k-1")
    staff.post(messages_url(run), {"topic": "notes", "data": {"n": 1}}, format="json",
               HTTP_IDEMPOTENCY_KEY="k-1")
    sent = [(e.who, e.what, e.via, e.gate, e.reason)
            for e in run_audit(WorkflowRun.objects.get(pk=run.pk)) if e.what == "sent a message"]
    ids = first.json()["id"], replay.json()["id"]
    assert sent == [
        ("owner", "sent a message", "API", "notes", f'message {ids[0]}, {{"n": 1}}'),
        ("staff", "sent a message", "API", "notes", f'message {ids[1]}, {{"n": 1}}'),
        ("staff", "sent a message", "API", "notes", f'message {ids[1]} (sent before), {{"n": 1}}'),
    ]


def test_a_message_to_a_finished_run_is_a_conflict_and_writes_nothing(users, owner):
    done = pw.start_workflow("sequential", {"x": 1}, owner=users["owner"])
    refused = owner.post(messages_url(done), {"data": 1}, format="json")
    assert refused.status_code == 409
    assert refused.json()["code"] == "INVALID_RUN_STATE"
    assert not WorkflowMessage.objects.exists()
    assert owner.post(f"{API}runs/{done.pk}/messages", {"data": 1},
                      format="json").status_code == 409  # without the slash too


def test_a_message_sent_again_with_its_idempotency_key_is_replayed(users, owner):
    run = reading_notes(users["owner"])
    body = {"topic": "notes", "data": 1, "idempotency_key": "note-1"}
    first = owner.post(messages_url(run), body, format="json")
    assert first.status_code == 202
    again = owner.post(messages_url(run), body, format="json")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    by_header = owner.post(messages_url(run), {"topic": "notes", "data": 1}, format="json",
                           HTTP_IDEMPOTENCY_KEY="note-1")
    assert by_header.status_code == 200 and by_header.json()["id"] == first.json()["id"]
    conflict = owner.post(messages_url(run), {**body, "data": 2}, format="json")
    assert conflict.status_code == 409 and conflict.json()["code"] == "IDEMPOTENCY_CONFLICT"
    assert WorkflowMessage.objects.count() == 1
    run.refresh_from_db()
    assert run.status == "suspended"  # one message received, the second recv waits


@pytest.mark.parametrize(("body", "field"), [
    ({"topic": ""}, "topic"),
    ({"topic": "t" * 256}, "topic"),
    ({"topic": None}, "topic"),
    ({"topic": "notes\x00"}, "topic"),
    ({"idempotency_key": "i" * 256}, "idempotency_key"),
    ({"event": "paid"}, "event"),
])
def test_an_invalid_message_is_refused_naming_the_field_and_writes_nothing(users, owner, body,
                                                                           field):
    run = reading_notes(users["owner"])
    refused = owner.post(messages_url(run), body, format="json")
    assert refused.status_code == 400, refused.content
    assert field in refused.json()["errors"]
    assert not WorkflowMessage.objects.exists()


def test_a_message_to_an_unknown_run_is_a_404(owner):
    missing = owner.post(f"{API}runs/6f1c0000-0000-4000-8000-000000000000/messages/",
                         {"data": 1}, format="json")
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
    assert owner.post(f"{API}runs/not-a-uuid/messages/", {}, format="json").status_code == 404


# --- GET runs/{id}/state/ ----------------------------------------------------------------


def test_who_may_read_a_runs_state(users, anonymous, owner, other, staff, sender):
    run = waiting_for_payment(users["owner"])
    sender.post(EVENTS, {"event": "payment.succeeded", "key": "order-8", "data": 5},
                format="json")
    url = f"{API}runs/{run.pk}/state/"
    assert anonymous.get(url).status_code in DENIED
    assert other.get(url).status_code == 404
    assert sender.get(url).status_code == 404  # sending events is not reading runs
    for reader in (owner, staff):
        answer = reader.get(url)
        assert answer.status_code == 200 and answer.json() == {"paid": 5, "order": "order-8"}
    assert owner.get(url, {"page": 1}).status_code == 400  # it takes no query parameter
    assert WorkflowRun.objects.get(pk=run.pk).state == {"paid": 5, "order": "order-8"}
