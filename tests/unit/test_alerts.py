"""Failure alerts (pikku_workflows.alerts): the signal, the throttle per workflow (the
engine's fake clock), mail to the admins (Django's locmem backend), a webhook (a real HTTP
server on 127.0.0.1) and the throttle shared by processes (the database)."""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.db import transaction
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import alerts, signals
from pikku_workflows.checks import check_settings
from pikku_workflows.conf import pikku_settings, validate_setting
from pikku_workflows.exceptions import WorkflowConfigurationError
from pikku_workflows.models import WorkflowAlertThrottle
from pikku_workflows.testing import fake_clock
from tests.processes import all_at_once

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADMINS = [("Ops", "ops@example.com")]


@pytest.fixture
def alerting():
    alerts.install()
    yield
    alerts.uninstall()


def alert_settings(**options):
    return override_settings(ADMINS=ADMINS, PIKKU_WORKFLOWS={
        "DEFAULT_RETRY_DELAY": 0, "ALERTS": options})


def fail(workflow="traced_broken"):
    run = pw.start_workflow(workflow, {}, inline=True)
    assert run.status == "failed"
    return run


class Webhook:
    """A real HTTP server on a free local port that records the JSON bodies posted to it
    and answers ``status``."""

    def __init__(self, status: int = 204) -> None:
        self.bodies: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers["Content-Length"])
                hook.bodies.append({"content_type": self.headers["Content-Type"],
                                    **json.loads(self.rfile.read(length))})
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/pikku"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


def test_one_mail_per_workflow_per_window_then_the_count_of_folded_failures(alerting):
    with alert_settings(MAIL_ADMINS=True, THROTTLE="15min"), fake_clock(START) as clock:
        first = fail()
        assert len(mail.outbox) == 1
        message = mail.outbox[0]
        assert message.to == ["ops@example.com"]
        assert message.subject.endswith("workflow traced_broken failed")
        assert f"run {first.pk} failed: step 'Broken' failed: always broken" in message.body
        assert "more failure" not in message.body

        for minutes in (1, 5, 1):  # three more failures inside the window: folded in
            clock.sleep(minutes * 60)
            fail()
        fail("alerted_twin")  # another workflow has a window of its own
        assert [m.subject.split()[-2] for m in mail.outbox] == ["traced_broken",
                                                                "alerted_twin"]

        clock.sleep(9 * 60)  # 16 minutes after the first alert
        fifth = fail()
    assert len(mail.outbox) == 3
    body = mail.outbox[2].body
    assert f"run {fifth.pk} failed: step 'Broken' failed: always broken" in body
    assert "(3 more failures since 2026-03-02T09:01:00+00:00)" in body
    row = WorkflowAlertThrottle.objects.get(workflow="traced_broken")
    assert (row.last_alert_at, row.folded, row.folded_since) == (
        START + timedelta(minutes=16), 0, None)


def test_the_signal_carries_the_alert(alerting):
    received = []

    def receiver(sender, **kwargs):
        received.append(kwargs)

    signals.run_failure_alert.connect(receiver)
    try:
        with alert_settings(THROTTLE="1h"), fake_clock(START) as clock:
            first = fail()
            clock.sleep(60)
            fail()
            clock.sleep(3600)
            third = fail()
    finally:
        signals.run_failure_alert.disconnect(receiver)
    assert len(mail.outbox) == 0  # MAIL_ADMINS is off by default
    assert [(r["run"], r["workflow"], r["folded"], r["folded_since"]) for r in received] == [
        (first.pk, "traced_broken", 0, None),
        (third.pk, "traced_broken", 1, START + timedelta(minutes=1))]
    assert "always broken" in received[1]["error"]["message"]
    assert received[1]["message"] == received[1]["alert"].message
    assert "1 more failure since 2026-03-02T09:01:00+00:00" in received[1]["message"]


def test_the_webhook_gets_the_alert_as_json(alerting, webhook):
    with alert_settings(WEBHOOK_URL=webhook.url, THROTTLE=0), fake_clock(START):
        run = fail()
        fail("alerted_twin")
    assert [body["workflow"] for body in webhook.bodies] == ["traced_broken", "alerted_twin"]
    body = webhook.bodies[0]
    assert body["content_type"] == "application/json"
    assert body["run_id"] == str(run.pk)
    assert body["failed_at"] == START.isoformat()
    assert body["folded"] == 0 and body["folded_since"] is None
    assert body["text"].startswith(f"workflow traced_broken: run {run.pk} failed:")
    assert "always broken" in body["error"]["message"]


def test_a_failing_webhook_is_logged_and_the_run_is_left_alone(alerting, caplog):
    broken = Webhook(status=500)
    try:
        with alert_settings(WEBHOOK_URL=broken.url, MAIL_ADMINS=True), \
                caplog.at_level(logging.ERROR, logger="pikku_workflows.alerts"):
            run = fail()
    finally:
        broken.close()
    assert len(broken.bodies) == 1
    run.refresh_from_db()
    assert run.status == "failed"
    assert len(mail.outbox) == 1  # the other notifier still ran
    assert any("could not be posted to the webhook" in r.getMessage() and "500" in
               r.getMessage() for r in caplog.records)


def test_alerts_go_out_after_the_failure_commits(alerting):
    with alert_settings(MAIL_ADMINS=True):
        with transaction.atomic():
            fail()
            assert mail.outbox == []
            assert not WorkflowAlertThrottle.objects.exists()
        assert len(mail.outbox) == 1


def test_without_the_setting_nothing_is_counted(alerting):
    with override_settings(ADMINS=ADMINS, PIKKU_WORKFLOWS={"DEFAULT_RETRY_DELAY": 0}):
        fail()
    assert mail.outbox == []
    assert not WorkflowAlertThrottle.objects.exists()


def test_processes_share_the_throttle(tmp_path):
    """Four processes count a failure of the same workflow at the same moment: one alert."""
    script = (
        "import uuid\n"
        "from pikku_workflows import alerts\n"
        "alert = alerts.record_failure('shared_wf', uuid.uuid4(), {}, throttle=900)\n"
        "print(json.dumps(alert is not None))\n"
    )
    results = all_at_once(script, tmp_path, processes=4)
    assert sorted(results) == [False, False, False, True]
    row = WorkflowAlertThrottle.objects.get(workflow="shared_wf")
    assert row.folded == 3
    alert = alerts.record_failure("shared_wf", uuid.uuid4(), {"message": "x"}, throttle=900,
                                  now=row.last_alert_at + timedelta(minutes=15))
    assert alert is not None and alert.folded == 3


@pytest.mark.parametrize("value, message", [
    ("yes", "must be None or a dict"),
    ({"MAIL": True}, "unknown key(s) MAIL"),
    ({"MAIL_ADMINS": 1}, "MAIL_ADMINS'] must be True or False"),
    ({"WEBHOOK_URL": "ftp://example.com/x"}, "must be an http:// or https:// URL"),
    ({"THROTTLE": "soon"}, "THROTTLE"),
])
def test_bad_settings_are_refused(value, message):
    with pytest.raises(WorkflowConfigurationError, match=re.escape(message)):
        validate_setting("ALERTS", value)
    with override_settings(PIKKU_WORKFLOWS={"ALERTS": value}):
        (error,) = check_settings()
    assert error.id == "pikku_workflows.E011"


def test_the_defaults():
    with override_settings(PIKKU_WORKFLOWS={"ALERTS": {}}):
        assert pikku_settings.ALERTS == {"MAIL_ADMINS": False, "WEBHOOK_URL": None,
                                         "THROTTLE": 900.0}
    assert pikku_settings.ALERTS is None
