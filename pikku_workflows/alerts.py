"""Failure alerts: ``run_failure_alert``, throttled per workflow, by mail or webhook.

Enable with ``PIKKU_WORKFLOWS = {"ALERTS": {"MAIL_ADMINS": True, "WEBHOOK_URL": None,
"THROTTLE": "15min"}}`` in every process that runs workflows: at startup the app connects
a receiver to ``signals.run_failed``. For each failed run it asks the workflow's throttle
row (``WorkflowAlertThrottle``, in the database, so every process shares it) whether an
alert may go out: at most one per workflow per ``THROTTLE``; the failures in between are
folded into the next alert (``folded``: "3 more failures since ..."). When one may, it
sends the signal ``signals.run_failure_alert`` once the throttle's write has committed,
and the built-in notifiers (``MAIL_ADMINS``: Django's ``mail_admins``; ``WEBHOOK_URL``: a
JSON POST) are receivers of that signal, as a project's own may be. A notifier that fails
is logged (logger ``pikku_workflows.alerts``), never raised: the run is already failed.
"""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.mail import mail_admins
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.dispatch import Signal

from . import signals
from .conf import pikku_settings
from .engine.clock import clock
from .models import WorkflowAlertThrottle, WorkflowRun

logger = logging.getLogger("pikku_workflows.alerts")

DISPATCH_UID = "pikku_workflows.alerts"
#: Seconds a webhook may take to answer.
WEBHOOK_TIMEOUT = 10.0


@dataclass(frozen=True)
class Alert:
    """One failure alert: the failed run, and the failures folded in since the last alert."""

    workflow: str
    run: uuid.UUID
    error: dict[str, Any]
    failed_at: datetime
    folded: int
    folded_since: datetime | None

    @property
    def message(self) -> str:
        """The alert in one line of text."""
        reason = str(self.error.get("message") or self.error.get("code") or "failed")
        text = f"workflow {self.workflow}: run {self.run} failed: {reason}"
        if self.folded and self.folded_since is not None:
            plural = "failure" if self.folded == 1 else "failures"
            text += (f" ({self.folded} more {plural} since "
                     f"{self.folded_since.isoformat(timespec='seconds')})")
        return text

    def as_json(self) -> dict[str, Any]:
        """The webhook's body (``text`` is what chat webhooks show)."""
        return {"text": self.message, "workflow": self.workflow, "run_id": str(self.run),
                "error": {k: v for k, v in self.error.items() if k in ("message", "code")},
                "failed_at": self.failed_at.isoformat(), "folded": self.folded,
                "folded_since": self.folded_since.isoformat() if self.folded_since else None}


def record_failure(workflow: str, run: uuid.UUID, error: dict[str, Any], *,
                   throttle: float, now: datetime | None = None) -> Alert | None:
    """Count a failure of ``workflow`` against its throttle; the alert to send, if due.

    One transaction: the first statement takes the throttle row's lock, so two processes
    counting failures of the same workflow at once are serialized (one alert per window).

    Args:
        workflow: The failed run's workflow.
        run: The failed run.
        error: The run's error dict.
        throttle: Seconds between two alerts of the workflow (0: every failure).
        now: The failure's time (default: the engine's clock).

    Returns:
        The alert, or None when the workflow had one less than ``throttle`` ago (this
        failure is then folded into its next alert).
    """
    now = now or clock().now()
    rows = WorkflowAlertThrottle.objects.filter(workflow=workflow)
    for _ in range(2):  # a second time if another process created the row meanwhile
        with transaction.atomic():
            counted = rows.update(folded=F("folded") + 1,
                                  folded_since=Coalesce("folded_since", Value(now)))
            if not counted:
                try:
                    with transaction.atomic():
                        WorkflowAlertThrottle.objects.create(workflow=workflow,
                                                             last_alert_at=now)
                except IntegrityError:
                    continue
                return Alert(workflow, run, error, now, 0, None)
            row = rows.get()
            if row.last_alert_at + timedelta(seconds=throttle) > now:
                return None
            rows.update(last_alert_at=now, folded=0, folded_since=None)
            folded = row.folded - 1  # this failure is the alert's own
            return Alert(workflow, run, error, now, folded,
                         row.folded_since if folded else None)
    return None


def _on_run_failed(run: uuid.UUID | None = None, workflow: str | None = None,
                   error: dict[str, Any] | None = None, **kwargs: object) -> None:
    try:
        settings = pikku_settings.ALERTS
        if settings is None or run is None:
            return
        alert = record_failure(workflow or "", run, error or {},
                               throttle=settings["THROTTLE"])
    except Exception:
        logger.exception("the failure of run %s could not be counted for alerts", run)
        return
    if alert is not None:
        # After the throttle's write commits (at once: run_failed is sent after commit).
        transaction.on_commit(lambda: send_alert(alert))


def send_alert(alert: Alert) -> None:
    """Send ``run_failure_alert`` for ``alert``; a receiver that raises is logged."""
    for receiver, result in signals.run_failure_alert.send_robust(
            sender=WorkflowRun, alert=alert, run=alert.run, workflow=alert.workflow,
            error=alert.error, folded=alert.folded, folded_since=alert.folded_since,
            message=alert.message):
        if isinstance(result, Exception):
            logger.error("alert receiver %r failed for run %s: %r", receiver, alert.run,
                         result)


def mail_admins_notifier(alert: Alert, **kwargs: object) -> None:
    """The built-in ``MAIL_ADMINS`` notifier: one mail to ``ADMINS``."""
    settings = pikku_settings.ALERTS
    if not settings or not settings["MAIL_ADMINS"]:
        return
    try:
        mail_admins(f"workflow {alert.workflow} failed", alert.message + "\n",
                    fail_silently=False)
    except Exception:
        logger.exception("the failure alert of run %s could not be mailed", alert.run)


def webhook_notifier(alert: Alert, **kwargs: object) -> None:
    """The built-in ``WEBHOOK_URL`` notifier: a JSON POST (``Alert.as_json``)."""
    settings = pikku_settings.ALERTS
    url = settings["WEBHOOK_URL"] if settings else None
    if not url:
        return
    request = urllib.request.Request(  # noqa: S310 - the setting is checked: http(s) only
        url, data=json.dumps(alert.as_json()).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "pikku-workflows"})
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:  # noqa: S310
            response.read()
    except Exception as exc:
        logger.error("the failure alert of run %s could not be posted to the webhook: %r",
                     alert.run, exc)


_RECEIVERS: list[tuple[Signal, Callable[..., None]]] = [
    (signals.run_failed, _on_run_failed),
    (signals.run_failure_alert, mail_admins_notifier),
    (signals.run_failure_alert, webhook_notifier),
]


def install() -> None:
    """Connect the failure receiver and the built-in notifiers (idempotent)."""
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, weak=False, dispatch_uid=f"{DISPATCH_UID}.{receiver.__name__}")


def uninstall() -> None:
    """Disconnect them."""
    for signal, receiver in _RECEIVERS:
        signal.disconnect(dispatch_uid=f"{DISPATCH_UID}.{receiver.__name__}")


def installed() -> bool:
    """Whether failures are counted for alerts in this process."""
    return any(entry[0][0] == f"{DISPATCH_UID}._on_run_failed"
               for entry in signals.run_failed.receivers)
