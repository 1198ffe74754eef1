"""The demo shop: its start page starts each example and pays the orders waiting for their
bank transfer; its approval completes the saga; a transfer's payment event ships the order,
its timeout releases the stock and cancels it."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.test import override_settings
from django.urls import include, path, reverse
from django.utils.html import escape

import pikku_workflows as pw
from demo_project.shop.workflows import EXAMPLES, PAYMENT_EVENT, payment_key
from pikku_workflows.models import WorkflowEvent, WorkflowRun
from pikku_workflows.testing import fake_clock, run_scheduler
from tests.unit.docs_blocks import ROOT
from tests.urls import urlpatterns as test_urls

pytestmark = pytest.mark.django_db

urlpatterns = [*test_urls, path("shop/", include("demo_project.shop.urls"))]


@override_settings(ROOT_URLCONF=__name__)
def test_the_start_page_lists_and_starts_every_example(admin_client):
    page = admin_client.get(reverse("shop:start"))
    assert page.status_code == 200
    body = page.content.decode()
    assert all(escape(label) in body for _, label, _ in EXAMPLES)
    # Each input as JSON: what pikku_start and the REST API take.
    assert all(escape(json.dumps(data)) in body for _, _, data in EXAMPLES)
    for index, (name, _, _) in enumerate(EXAMPLES):
        started = admin_client.post(reverse("shop:start"), {"example": index})
        run = WorkflowRun.objects.filter(parent_run__isnull=True).order_by("-created_at")[0]
        assert run.workflow == name and started.status_code == 302
        assert started["Location"] == reverse(
            "admin:pikku_workflows_workflowrun_change", args=[run.pk])
    assert WorkflowRun.objects.filter(parent_run__isnull=True).count() == len(EXAMPLES)
    assert admin_client.post(reverse("shop:start"), {"example": "99"}).status_code == 302


@override_settings(ROOT_URLCONF=__name__)
def test_the_start_page_is_for_staff(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("shopper", password="pw"))
    assert client.get(reverse("shop:start")).status_code == 302  # to the admin login


def test_a_large_order_waits_for_the_manager_then_ships(django_user_model):
    manager = django_user_model.objects.create_superuser("mgr", "m@example.com", "pw")
    _, _, data = EXAMPLES[1]
    run = pw.start_workflow("order_saga", {**data, "cool_off": 0})
    assert run.status == "suspended"
    run = pw.approve_step(run.pk, "Manager sign-off", {"approved": True}, user=manager)
    assert run.status == "completed" and run.output["status"] == "shipped"
    assert run.output["payment"]["amount"] == 1080.0  # after the bulk discount


def test_a_refused_large_order_is_refunded_and_cancelled(django_user_model):
    manager = django_user_model.objects.create_superuser("mgr", "m@example.com", "pw")
    _, _, data = EXAMPLES[1]
    run = pw.start_workflow("order_saga", data)
    run = pw.approve_step(run.pk, "Manager sign-off", {"approved": False}, user=manager)
    assert run.status == "cancelled"
    assert run.steps.get(step_name="Refund").status == "succeeded"


def test_one_order_per_customer_runs_at_a_time(django_user_model):
    manager = django_user_model.objects.create_superuser("mgr", "m@example.com", "pw")
    _, _, large = EXAMPLES[1]
    _, _, small = EXAMPLES[0]
    waiting = pw.start_workflow("order_saga", {**large, "cool_off": 0})
    queued = pw.start_workflow("order_saga", {**small, "customer": large["customer"],
                                              "cool_off": 0})
    other = pw.start_workflow("order_saga", {**small, "cool_off": 0})
    assert (waiting.status, queued.status, other.status) == ("suspended", "scheduled",
                                                             "completed")
    assert queued.waiting_for == "concurrency" and not queued.steps.exists()
    pw.approve_step(waiting.pk, "Manager sign-off", {"approved": True}, user=manager)
    queued.refresh_from_db()
    assert queued.status == "completed" and queued.output["status"] == "shipped"


def test_make_demo_on_a_busy_address_suggests_a_free_one(monkeypatch, capsys):
    import importlib.util
    import signal
    import socket

    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    assert spec and spec.loader
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        monkeypatch.setattr(demo, "ADDRESS", address)
        sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own
        try:
            assert demo.main() == 1  # before migrating or starting anything
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        message = capsys.readouterr().err
        assert message.startswith(f"{address} is already in use")
        suggested = message.split("DEMO_ADDRESS=")[1].split()[0]
        assert suggested != address and demo.address_free(suggested)


@override_settings(ROOT_URLCONF=__name__)
def test_the_api_docs_curl_sample_works_against_the_demo(client, django_user_model):
    """docs/api.md's curl commands, replayed through the test client with their
    credentials (the demo's admin), body and paths; the SSE stream is left to the API
    tests."""
    import base64
    import shlex

    from tests.unit.docs_blocks import parse

    [block] = [b for b in parse(ROOT / "docs" / "api.md") if "order_saga/start/" in b.code]
    django_user_model.objects.create_superuser("admin", "admin@example.com", "admin")
    commands = [shlex.split(c, comments=True)
                for c in block.code.replace("\\\n", " ").splitlines()]
    run_id = ""
    for words in commands:
        if not words or "-N" in words:
            continue
        options = dict(zip(words[1::2], words[2::2], strict=False))
        credentials = base64.b64encode(options["-u"].encode()).decode()
        url = words[-1].removeprefix("http://127.0.0.1:8000").replace("0b9e...", run_id)
        headers = {"HTTP_AUTHORIZATION": f"Basic {credentials}"}
        if "-d" in options:
            answer = client.post(url, options["-d"], content_type="application/json",
                                 **headers)
            assert answer.status_code == 202, answer.content
            assert answer.json()["status"] in ("running", "suspended")
            run_id = answer.json()["id"]
        else:
            answer = client.get(url, **headers)
            assert answer.status_code == 200, answer.content
            assert answer.json()["workflow"] == "order_saga"
    assert run_id


def test_a_large_order_is_approved_by_a_manager_not_by_the_admin_who_started_it():
    """The demo's approval policy at work: ``not-initiator`` plus the approve permission,
    with the users ``demo_seed`` creates (admin starts, manager approves)."""
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("demo_seed", stdout=StringIO())
    users = get_user_model().objects
    admin, manager = users.get(username="admin"), users.get(username="manager")
    assert manager.is_staff and not manager.is_superuser
    clerk = users.create_user("clerk", password="pw", is_staff=True)
    run = WorkflowRun.objects.get(workflow="order_saga", status="suspended",
                                  error__code="WAITING_FOR_APPROVAL")
    assert run.owner == admin
    with pytest.raises(pw.WorkflowApprovalForbiddenError, match="initiator"):
        pw.approve_step(run.pk, "Manager sign-off", {"approved": True}, user=admin)
    with pytest.raises(pw.WorkflowApprovalForbiddenError, match="approve_workflowrun"):
        pw.approve_step(run.pk, "Manager sign-off", {"approved": True}, user=clerk)
    run = pw.approve_step(run.pk, "Manager sign-off", {"approved": True}, user=manager)
    run.refresh_from_db()
    assert run.status in ("running", "completed")  # the cool-off sleep may still wait
    gate = run.steps.get(step_name="__workflow_approval:Manager sign-off")
    assert gate.result["decided_by"] == manager.pk


def test_the_workflows_page_offers_an_order_as_the_start_forms_example(admin_client):
    page = admin_client.get(reverse("admin:pikku_workflows_registeredworkflow_changelist"))
    section = page.content.decode().split('id="workflow-order_saga"', 1)[1]
    example = section.split('name="input"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert json.loads(example.replace("&quot;", '"')) == {
        "order_id": 8, "customer": "ada", "amount": 40, "skus": ["pin"], "cool_off": "1s"}


def transfer_order():
    [data] = [data for _, _, data in EXAMPLES if data.get("pay_by") == "transfer"]
    return data


def test_an_order_paid_by_transfer_waits_for_its_payment_then_ships():
    data = {**transfer_order(), "cool_off": 0}
    run = pw.start_workflow("order_saga", data)
    assert run.status == "suspended" and run.error["code"] == "WAITING_FOR_EVENT"
    assert (run.error["event"], run.error["key"]) == (PAYMENT_EVENT, "order-10")
    assert not run.steps.filter(step_name="Charge").exists()  # the bank charges
    # Another order's payment wakes nothing.
    assert pw.send_event(PAYMENT_EVENT, {"amount": 1}, key=payment_key(11)).woken == 0
    sent = pw.send_event(PAYMENT_EVENT, {"amount": 60, "bank": "demo"}, key="order-10")
    assert sent.woken == 1
    run.refresh_from_db()
    assert run.status == "completed" and run.output["status"] == "shipped"
    assert run.output["payment"] == {"amount": 60, "bank": "demo"}


def test_an_unpaid_transfer_releases_the_stock_and_cancels_the_order():
    with fake_clock() as clock:
        run = pw.start_workflow("order_saga", transfer_order())
        assert run.status == "suspended"
        clock.advance("9min")
        run_scheduler()
        assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"
        clock.advance("2min")  # past the order's payment_timeout, 10 min
        run_scheduler()
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert run.error["message"] == "no payment received in time"
    assert run.steps.get(step_name="Release stock").status == "succeeded"


@override_settings(ROOT_URLCONF=__name__)
def test_the_start_page_sends_the_payment_of_a_waiting_order(admin_client, django_user_model):
    index = next(i for i, (_, _, data) in enumerate(EXAMPLES) if data.get("pay_by"))
    admin_client.post(reverse("shop:start"), {"example": index})
    run = WorkflowRun.objects.get(workflow="order_saga")
    assert run.status == "suspended"
    page = admin_client.get(reverse("shop:start")).content.decode()
    row = page.split(f'data-waiting="{run.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "order-10" in row
    # Until when it waits: its timeout, as the console shows times.
    until = datetime.fromisoformat(run.error["timeout_at"])
    assert f'<time datetime="{until.isoformat()}"' in row
    # Staff without add_workflowevent: refused, nothing sent.
    clerk = django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    from django.test import Client

    other = Client()
    other.force_login(clerk)
    refused = other.post(reverse("shop:start"), {"pay": str(run.pk)}, follow=True)
    assert "add_workflowevent" in refused.content.decode()
    assert not WorkflowEvent.objects.exists()
    answer = admin_client.post(reverse("shop:start"), {"pay": str(run.pk)})
    assert answer["Location"] == reverse("admin:pikku_workflows_workflowrun_change",
                                         args=[run.pk])
    event = WorkflowEvent.objects.get()
    assert (event.event, event.key, event.data["order_id"]) == (PAYMENT_EVENT, "order-10", 10)
    run.refresh_from_db()
    assert run.status != "suspended"  # paid: on to the cool-off and the shipment
    assert f'data-waiting="{run.pk}"' not in admin_client.get(
        reverse("shop:start")).content.decode()
    # A run that waits for nothing, or no run at all: a message, nothing sent.
    for value in (str(run.pk), "not-a-run"):
        answer = admin_client.post(reverse("shop:start"), {"pay": value}, follow=True)
        assert answer.status_code == 200
    assert WorkflowEvent.objects.count() == 1


def test_the_demo_s_welcome_emails_hold_the_email_rate_limit():
    from demo_project import settings as demo_settings
    from pikku_workflows.models import StepAttempt
    from pikku_workflows.registry import registry
    from pikku_workflows.testing import fake_clock, run_inline

    limits = demo_settings.PIKKU_WORKFLOWS["LIMITS"]
    assert limits == {"email": {"rate": "10/s"}}
    assert registry.function("send_welcome").limits == ("email",)
    with override_settings(PIKKU_WORKFLOWS={"LIMITS": limits}), run_inline(), fake_clock():
        for n in range(12):
            pw.start_workflow("team_onboarding", {"email": f"u{n}@elsewhere.org",
                                                  "name": f"U{n}", "team": []})
    sent = sorted(StepAttempt.objects.filter(step__rpc_name="send_welcome")
                  .values_list("running_at", flat=True))
    assert len(sent) == 12
    # 10 a second: the 11th and 12th welcome emails went out a second after the first two.
    assert (sent[10] - sent[0]).total_seconds() >= 1
    assert (sent[11] - sent[1]).total_seconds() >= 1
