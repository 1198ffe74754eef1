"""The console's events and messages (DESIGN 8.2): what a waiting run's page says, its send
forms and their permissions and admin log, the events list, the waiting triage lists."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags

import pikku_workflows as pw
from pikku_workflows.admin.graph_svg import definition_svg
from pikku_workflows.models import WorkflowEvent, WorkflowMessage, WorkflowRun
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock
from tests.admin.test_graph_overlay import drawing, parse

pytestmark = pytest.mark.django_db

#: 15:05 UTC on a winter day: 16:05 in Paris (UTC+1).
NOW = datetime(2026, 12, 4, 15, 5, tzinfo=UTC)


@pw.workflow
def evadmin_pays(wf, data):
    paid = wf.wait_for_event("Payment", "payment.succeeded", key=data.get("key"),
                             timeout=data.get("timeout"))
    wf.do("Ship", lambda: "shipped")
    return {"paid": paid}


@pw.function
def evadmin_ship(data):
    return {"shipped": data}


evadmin_graph = pw.graph_workflow(
    "evadmin_graph",
    nodes={"pay": None, "ship": "evadmin_ship"},
    config={"pay": {"wait_for_event": {"event": "payment.succeeded",
                                       "key": pw.ref("trigger", "order"), "timeout": "2h"},
                    "next": "ship"},
            "ship": {"input": {"payment": pw.ref("pay")}}},
)


@pw.workflow
def evadmin_inbox(wf, data):
    got = wf.recv("Inbox", data.get("topic", "default"), timeout=data.get("timeout"))
    return {"got": got}


def url(name, *args):
    return reverse(f"admin:pikku_workflows_{name}", args=args)


def staff_client(django_user_model, name, *codenames):
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client, user


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", strip_tags(html))


def waiting_for_payment(key="order-8", timeout="1h", owner=None):
    run = pw.start_workflow("evadmin_pays", {"key": key, "timeout": timeout}, owner=owner)
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_EVENT"
    return run


# --- the run page ----------------------------------------------------------------------------


def test_a_wait_that_timed_out_says_so_on_the_run_page(admin_client):
    with fake_clock(NOW) as clock:
        run = waiting_for_payment(timeout="1h")
        clock.advance("2h")
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"paid": None}
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    waits = html.split('class="pk-waits"', 1)[1].split("</table>", 1)[0]
    assert 'data-outcome="timed_out"' in waits and "timed out" in waits


def test_the_page_says_which_event_and_until_when_in_the_users_zone(admin_client):
    with fake_clock(NOW):
        run = waiting_for_payment(timeout="1h")
        with timezone.override("Europe/Paris"):
            html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    summary = html.split('id="pk-summary"', 1)[1].split("</dl>", 1)[0]
    assert "waiting for event payment.succeeded (key order-8) until 17:05" in text_of(summary)
    assert 'data-wait="WAITING_FOR_EVENT"' in summary
    # The tooltip has the time in full, in the user's zone.
    assert 'title="2026-12-04 17:05:00+01:00 (CET)"' in summary
    # DESIGN 1.1: send or cancel, never resume.
    assert "pk-tool-resume" not in html and "pk-tool-cancel" in html
    assert 'id="pk-send-event"' in html


def test_a_wait_without_key_or_timeout_says_so(admin_client):
    run = waiting_for_payment(key=None, timeout=None)
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    text = text_of(html.split('id="pk-summary"', 1)[1].split("</dl>", 1)[0])
    assert "waiting for event payment.succeeded (no key)" in text
    assert " until " not in text


def test_a_run_waiting_for_a_message_says_its_topic(admin_client):
    with fake_clock(NOW):
        run = pw.start_workflow("evadmin_inbox", {"topic": "replies", "timeout": "2d"})
        html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    text = text_of(html.split('id="pk-summary"', 1)[1].split("</dl>", 1)[0])
    assert "waiting for a message on replies until Dec 6 15:05" in text
    assert 'id="pk-send-message"' in html and 'id="pk-send-event"' not in html
    assert "pk-tool-resume" not in html


def test_the_send_event_form_sends_it_logs_it_and_the_run_goes_on(django_user_model):
    run = waiting_for_payment()
    client, user = staff_client(django_user_model, "cashier", "view_workflowrun",
                                "add_workflowevent")
    answer = client.post(url("workflowrun_send_event", run.pk), {
        "event": "payment.succeeded", "key": "order-8", "payload": '{"amount": 40}'})
    assert answer.status_code == 302
    event = WorkflowEvent.objects.get()
    assert (event.event, event.key, event.data, event.sent_by) == (
        "payment.succeeded", "order-8", {"amount": 40}, user)
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"paid": {"amount": 40}}
    entry = LogEntry.objects.get(object_id=str(run.pk))
    assert entry.user == user and entry.change_message.startswith(
        'sent the event "payment.succeeded" via the console: event ')
    html = client.get(url("workflowrun_change", run.pk)).content.decode()
    waits = html.split('class="pk-waits"', 1)[1].split("</table>", 1)[0]
    assert 'data-wait-step="Payment" data-outcome="received"' in waits
    assert f'data-received-event="{event.pk}"' in waits and "sent by cashier" in waits
    audit = html.split('id="pk-audit"', 1)[1]
    assert 'data-audit-what="sent the event" data-audit-who="cashier"' in audit
    assert "<q>payment.succeeded</q>" in audit
    assert 'key "order-8"' in audit.replace("&quot;", '"')


def test_sending_an_event_needs_add_workflowevent(django_user_model):
    run = waiting_for_payment()
    client, _ = staff_client(django_user_model, "viewer", "view_workflowrun",
                             "resume_workflowrun")
    html = client.get(url("workflowrun_change", run.pk)).content.decode()
    assert "waiting for event" in html and 'id="pk-send-event"' not in html
    for method in ("get", "post"):
        answer = getattr(client, method)(url("workflowrun_send_event", run.pk),
                                         {"event": "payment.succeeded", "key": "order-8"})
        assert answer.status_code == 403
    assert not WorkflowEvent.objects.exists()
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"
    # add_workflowevent alone opens no run page.
    sender, _ = staff_client(django_user_model, "sender", "add_workflowevent")
    assert sender.post(url("workflowrun_send_event", run.pk),
                       {"event": "payment.succeeded"}).status_code == 403
    assert not WorkflowEvent.objects.exists()


def test_bad_input_to_the_send_event_form_writes_nothing(admin_client):
    run = waiting_for_payment()
    for body in ({"event": "payment.succeeded", "payload": "{not json"},
                 {"event": "x" * 256}, {"event": ""},
                 {"event": "payment.succeeded", "key": "k" * 256}):
        answer = admin_client.post(url("workflowrun_send_event", run.pk), body)
        assert answer.status_code == 200  # the form again, with its error
        assert 'class="errorlist' in answer.content.decode()
    assert not WorkflowEvent.objects.exists() and not LogEntry.objects.exists()


def test_an_event_too_big_is_refused_with_the_engines_reason(admin_client, settings):
    run = waiting_for_payment()
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "MAX_INPUT_BYTES": 100}
    answer = admin_client.post(url("workflowrun_send_event", run.pk), {
        "event": "payment.succeeded", "key": "order-8", "payload": '"' + "x" * 200 + '"'},
        follow=True)
    assert "Send refused" in answer.content.decode()
    assert not WorkflowEvent.objects.exists() and not LogEntry.objects.exists()
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"


def test_the_owner_may_send_a_message_others_need_resume_workflowrun(django_user_model):
    owner_client, owner = staff_client(django_user_model, "owner", "view_workflowrun")
    run = pw.start_workflow("evadmin_inbox", {}, owner=owner)
    other, _ = staff_client(django_user_model, "other", "view_workflowrun")
    assert 'id="pk-send-message"' not in other.get(
        url("workflowrun_change", run.pk)).content.decode()
    assert other.post(url("workflowrun_send_message", run.pk),
                      {"topic": "default", "payload": "1"}).status_code == 403
    assert not WorkflowMessage.objects.exists()
    assert 'id="pk-send-message"' in owner_client.get(
        url("workflowrun_change", run.pk)).content.decode()
    answer = owner_client.post(url("workflowrun_send_message", run.pk),
                               {"topic": "default", "payload": '{"hi": 1}'})
    assert answer.status_code == 302
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"got": {"hi": 1}}
    message = WorkflowMessage.objects.get()
    assert message.sent_by == owner and message.received_at is not None
    entry = LogEntry.objects.get(object_id=str(run.pk))
    assert entry.user == owner and entry.change_message.startswith(
        'sent a message "default" via the console: message ')


def test_an_operator_with_resume_workflowrun_may_send_a_message(django_user_model):
    run = pw.start_workflow("evadmin_inbox", {})
    client, _ = staff_client(django_user_model, "operator", "view_workflowrun",
                             "resume_workflowrun")
    client.post(url("workflowrun_send_message", run.pk), {"topic": "default", "payload": "2"})
    assert WorkflowRun.objects.get(pk=run.pk).output == {"got": 2}
    html = client.get(url("workflowrun_change", run.pk)).content.decode()
    assert 'data-audit-what="sent a message" data-audit-who="operator"' in html


def test_messages_not_received_yet_are_listed_on_the_run_page(admin_client):
    run = pw.start_workflow("evadmin_inbox", {"topic": "replies"})
    first = pw.send(run.pk, {"n": 1}, topic="other")
    second = pw.send(run.pk, {"n": 2}, topic="other")
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    table = html.split('class="pk-unreceived"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'data-message="(\d+)"', table) == [str(first.id), str(second.id)]
    assert "other" in table and "{&quot;n&quot;: 1}" in table
    pw.send(run.pk, "yes", topic="replies")  # received at once: the run completes
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    table = html.split('class="pk-unreceived"', 1)[1].split("</table>", 1)[0]
    assert len(re.findall(r'data-message="', table)) == 2  # still never received


def test_a_message_to_a_finished_run_is_refused_with_a_message(admin_client):
    run = pw.start_workflow("evadmin_inbox", {})
    pw.send(run.pk, 1)
    answer = admin_client.post(url("workflowrun_send_message", run.pk),
                               {"topic": "default", "payload": "2"}, follow=True)
    assert "Send refused" in answer.content.decode()
    assert WorkflowMessage.objects.count() == 1


def test_the_resume_action_is_refused_for_a_run_waiting_for_an_event(admin_client):
    run = waiting_for_payment()
    admin_client.post(url("workflowrun_resume", run.pk), {"payload": ""}, follow=True)
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"
    changelist = url("workflowrun_changelist")
    preview = admin_client.post(changelist, {"action": "resume_runs",
                                             "_selected_action": [str(run.pk)]})
    assert "1 other in the selection will be skipped" in preview.content.decode()


# --- the events list ---------------------------------------------------------------------


def test_the_events_list_shows_who_consumed_each_event(admin_client, django_user_model):
    sender = django_user_model.objects.create_user("bank", password="pw")
    runs = [waiting_for_payment() for _ in range(5)]
    unmatched = pw.send_event("payment.failed", {"why": "no"}, key="order-9")
    sent = pw.send_event("payment.succeeded", {"amount": 40}, key="order-8", sent_by=sender)
    assert sent.woken == 5
    html = admin_client.get(url("workflowevent_changelist")).content.decode()
    row = html.split(f'href="{url("workflowevent_change", sent.id)}"', 1)[1].split("</tr>")[0]
    assert "5 runs:" in text_of(row) and "and 2 more" in text_of(row) and "bank" in row
    assert len(re.findall(r'data-consumer="', row)) == 3
    other = html.split(f'href="{url("workflowevent_change", unmatched.id)}"', 1)[1].split(
        "</tr>")[0]
    assert "no run" in other and "order-9" in other
    changelist = url("workflowevent_changelist")
    for query, shown in (("payment.succeeded", {sent.id}), ("payment.failed order-9",
                                                            {unmatched.id}),
                         ("payment.failed order-8", set()), ("order-8", set())):
        listed = admin_client.get(changelist, {"q": query}).content.decode()
        assert {int(i) for i in re.findall(r'/workflowevent/(\d+)/change/', listed)} == \
            shown, query
    page = admin_client.get(url("workflowevent_change", sent.id)).content.decode()
    assert "Consumed by 5 runs" in page and "&quot;amount&quot;: 40" in page
    consumers = re.findall(r'class="pk-consumer" data-consumer="([^"]+)"', page)
    assert sorted(consumers) == sorted(str(run.pk) for run in runs)
    assert "Payment" in page  # the step that received it


def test_the_events_admin_is_read_only_and_needs_its_view_permission(django_user_model):
    sent = pw.send_event("payment.succeeded", {"amount": 1})
    nobody, _ = staff_client(django_user_model, "nobody", "view_workflowrun")
    for name, args in (("workflowevent_changelist", ()), ("workflowevent_change", (sent.id,)),
                       ("workflowevent_send", ())):
        assert nobody.get(url(name, *args)).status_code == 403
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowevent")
    page = viewer.get(url("workflowevent_changelist")).content.decode()
    assert "payment.succeeded" in page and "pk-tool-send-event" not in page
    assert viewer.get(url("workflowevent_change", sent.id)).status_code == 200
    assert viewer.get(url("workflowevent_send")).status_code == 403
    # No add, change or delete through the ORM admin, whatever the permissions.
    everything, _ = staff_client(django_user_model, "all", "view_workflowevent",
                                 "add_workflowevent", "change_workflowevent",
                                 "delete_workflowevent")
    assert everything.get(url("workflowevent_add")).status_code == 403
    assert everything.post(url("workflowevent_delete", sent.id), {"post": "yes"}
                           ).status_code == 403
    assert WorkflowEvent.objects.count() == 1


def test_the_send_an_event_form_sends_it_and_logs_it(django_user_model):
    runs = [waiting_for_payment() for _ in range(2)]
    client, user = staff_client(django_user_model, "cashier", "view_workflowevent",
                                "add_workflowevent")
    assert "pk-tool-send-event" in client.get(url("workflowevent_changelist")).content.decode()
    answer = client.post(url("workflowevent_send"), {
        "event": "payment.succeeded", "key": "order-8", "payload": '{"amount": 40}',
        "idempotency_key": "webhook-1"})
    event = WorkflowEvent.objects.get()
    assert answer["Location"] == url("workflowevent_change", event.pk)
    assert event.sent_by == user and event.idempotency_key == "webhook-1"
    assert all(WorkflowRun.objects.get(pk=run.pk).status == "completed" for run in runs)
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.user) == (ADDITION, str(event.pk), user)
    assert entry.change_message == "sent via the console; it woke 2 run(s)"
    # The same idempotency key sends nothing twice.
    answer = client.post(url("workflowevent_send"), {
        "event": "payment.succeeded", "key": "order-8", "payload": '{"amount": 40}',
        "idempotency_key": "webhook-1"}, follow=True)
    assert "already sent with this idempotency key" in answer.content.decode()
    assert WorkflowEvent.objects.count() == 1 and LogEntry.objects.count() == 1
    # Other content under the same key: refused, nothing written.
    answer = client.post(url("workflowevent_send"), {
        "event": "payment.succeeded", "key": "order-8", "payload": '{"amount": 41}',
        "idempotency_key": "webhook-1"})
    assert "Send refused" in answer.content.decode()
    assert WorkflowEvent.objects.count() == 1 and LogEntry.objects.count() == 1


# --- the waiting triage lists ----------------------------------------------------------------


def test_the_waiting_lists_hold_their_waits_and_count_them(admin_client):
    events = [waiting_for_payment() for _ in range(3)]
    inbox = [pw.start_workflow("evadmin_inbox", {}) for _ in range(2)]
    suspended = pw.start_workflow("two_gates", {})
    gated = pw.start_workflow("needs_approval", {})

    def shown(path):
        body = admin_client.get(path).content.decode()
        return {run.pk for run in (*events, *inbox, suspended, gated)
                if str(run.pk)[:8] in body}, body

    changelist = url("workflowrun_changelist")
    found, body = shown(f"{changelist}?waiting=event")
    assert found == {run.pk for run in events}
    assert "<h1>Waiting for an event</h1>" in body
    assert "waiting for event payment.succeeded (key order-8) until" in text_of(body)
    found, body = shown(f"{changelist}?waiting=message")
    assert found == {run.pk for run in inbox}
    assert "waiting for a message on default" in text_of(body)
    counts = dict(re.findall(r'data-wait-list="(\w+)" data-count="(\d+)"', body))
    assert counts == {"event": "3", "message": "2"}
    # DESIGN 1.1: the suspended list holds what needs an operator; waits have own lists.
    assert shown(url("suspendedrun_changelist"))[0] == {suspended.pk}
    assert shown(url("approvalwaitingrun_changelist"))[0] == {gated.pk}
    pw.send_event("payment.succeeded", key="order-8")
    body = admin_client.get(changelist).content.decode()
    counts = dict(re.findall(r'data-wait-list="(\w+)" data-count="(\d+)"', body))
    assert counts == {"event": "0", "message": "2"}


# --- steps, timeline, graph ------------------------------------------------------------------


def test_wait_steps_are_shown_as_such_in_the_steps_and_the_timeline(admin_client):
    run = waiting_for_payment()
    inbox = pw.start_workflow("evadmin_inbox", {})
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    steps = html.split('id="pk-steps"', 1)[1].split('id="pk-audit"', 1)[0]
    assert '<span class="pk-kind pk-kind-event">event</span>' in steps
    timeline = html.split('id="pk-timeline"', 1)[1].split('id="pk-steps"', 1)[0]
    assert timeline.count('data-wait="event"') == 1
    html = admin_client.get(url("workflowrun_change", inbox.pk)).content.decode()
    assert '<span class="pk-kind pk-kind-message">message</span>' in html
    assert 'data-wait="message"' in html
    # Received: the wait's bar ends when the event came, the step says so.
    pw.send_event("payment.succeeded", {"amount": 1}, key="order-8")
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    assert 'data-wait="event"' in html and 'pk-kind-event' in html


def test_a_dsl_wait_is_drawn_as_a_wait_with_what_it_waits_for(admin_client):
    graph = registry.workflow("evadmin_pays").analysis.graph
    d = parse(definition_svg(registry.workflow("evadmin_pays")), graph)
    node = d.nodes["Payment"]
    assert node.badge == "event" and "event" in node.classes
    assert node.label == "Payment" and node.lines == ["payment.succeeded"]
    with fake_clock(NOW):
        run = waiting_for_payment()
        with timezone.override("Europe/Paris"):
            node = drawing(run).nodes["Payment"]
    assert {"event", "suspended"} <= node.classes
    assert node.lines == ["waiting for event", "until 17:05:00"]
    assert "waiting for event payment.succeeded" in node.tooltip
    assert "times out at 2026-12-04 17:05:00 CET" in node.tooltip
    pw.send_event("payment.succeeded", key="order-8")
    node = drawing(run).nodes["Payment"]
    assert "succeeded" in node.classes and "waiting" not in " ".join(node.lines)


def test_a_graph_node_waiting_for_an_event_is_drawn_as_a_wait(admin_client):
    definition = registry.workflow("evadmin_graph")
    d = parse(definition_svg(definition), definition.analysis.graph)
    node = d.nodes["pay"]
    assert node.badge == "event" and "event" in node.classes
    assert node.lines == ["payment.succeeded", "key trigger.order"]
    assert "waits for event payment.succeeded (key trigger.order)" in node.tooltip
    assert "times out after 2 h" in node.tooltip
    assert d.nodes["ship"].badge == ""  # a function's node has none
    run = pw.start_workflow("evadmin_graph", {"order": "order-8"})
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_EVENT"
    node = drawing(run).nodes["pay"]
    assert {"event", "suspended"} <= node.classes and node.lines[0] == "waiting for event"
    html = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    summary = text_of(html.split('id="pk-summary"', 1)[1].split("</dl>", 1)[0])
    assert "waiting for event payment.succeeded (key order-8) until" in summary
    pw.send_event("payment.succeeded", {"paid": 1}, key="order-8")
    run.refresh_from_db()
    assert run.status == "completed"
    d = drawing(run)
    assert "succeeded" in d.nodes["pay"].classes and "succeeded" in d.nodes["ship"].classes
