"""A run's wait for an event or a message, and the run page's forms that send it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern

from .. import operations, run_audit
from ..exceptions import WorkflowError, WorkflowInputError
from ..models import WorkflowEvent, WorkflowMessage, WorkflowRun, WorkflowWait
from ..status import RunStatus, WaitKind
from ..step_keys import step_label
from ..types import UserJSON
from .actions import WAIT_CODES, WAITING_FOR_EVENT, JSONField, is_uuid
from .urls import console_url, object_urls

if TYPE_CHECKING:
    _RunAdminBase = admin.ModelAdmin[WorkflowRun]
else:
    _RunAdminBase = object

#: The most unreceived messages a run page lists (oldest first).
MESSAGES_SHOWN = 50
#: The most waits for an event or a message a run page lists (oldest first).
WAITS_SHOWN = 50
#: The permission that sends an event (from anywhere: the API, the console).
SEND_EVENT_PERMISSION = "pikku_workflows.add_workflowevent"
#: The permission that sends a message to any run (its owner may always).
SEND_MESSAGE_PERMISSION = "pikku_workflows.resume_workflowrun"


@dataclass(frozen=True)
class Wait:
    """What a suspended run waits for, from its ``error`` (the engine writes it).

    Attributes:
        kind: ``event`` or ``message``.
        name: The event's name, or the message's topic.
        key: The event's key (None: an event sent with no key).
        until: When the wait times out, or None (never).
        step: The step key that waits.
    """

    kind: str
    name: str
    key: str | None
    until: datetime | None
    step: str


def run_wait(run: WorkflowRun) -> Wait | None:
    """What ``run`` waits for when it waits for an event or a message, else None."""
    error = run.error
    if run.status != RunStatus.SUSPENDED or not isinstance(error, dict) or \
            error.get("code") not in WAIT_CODES:
        return None
    until = None
    if isinstance(error.get("timeout_at"), str):
        try:
            until = datetime.fromisoformat(error["timeout_at"])
        except ValueError:
            until = None
    if error["code"] == WAITING_FOR_EVENT:
        key = error.get("key")
        return Wait(kind="event", name=str(error.get("event", "")),
                    key=None if key is None else str(key), until=until,
                    step=str(error.get("step", "")))
    return Wait(kind="message", name=str(error.get("topic") or "default"), key=None,
                until=until, step=str(error.get("step", "")))


def waits_to_receive(run: WorkflowRun) -> bool:
    """Whether ``run`` waits for an event or a message (sent or cancelled, never resumed)."""
    return run_wait(run) is not None


def unreceived_messages(run: WorkflowRun) -> list[WorkflowMessage]:
    """The messages sent to ``run`` that it has not received yet, oldest first."""
    return list(WorkflowMessage.objects.filter(run=run, received_at__isnull=True)
                .select_related("sent_by").order_by("id")[:MESSAGES_SHOWN])


def run_waits(run: WorkflowRun) -> list[Any]:
    """The run's waits for an event or a message, oldest first, each with ``label`` (its
    step as the user named it) and what ended it (the event or message, with its sender)."""
    # Any: the label becomes an attribute of the rows, for the template.
    waits: list[Any] = list(WorkflowWait.objects.filter(
        run=run, kind__in=[WaitKind.EVENT, WaitKind.MESSAGE]).select_related(
        "event__sent_by", "message__sent_by").order_by("id")[:WAITS_SHOWN])
    for wait in waits:
        wait.label = step_label(wait.step)
    return waits


def may_send_event(request: HttpRequest) -> bool:
    return bool(request.user.has_perm(SEND_EVENT_PERMISSION))


def may_send_message(request: HttpRequest, run: WorkflowRun) -> bool:
    return bool(request.user.has_perm(SEND_MESSAGE_PERMISSION)) or (
        run.owner_id is not None and run.owner_id == request.user.pk)


class SendEventForm(forms.Form):
    """An event: its name and key (the wait's, as given), its data, an idempotency key."""

    event = forms.CharField(max_length=WorkflowEvent._meta.get_field("event").max_length)
    key = forms.CharField(required=False, max_length=WorkflowEvent._meta.get_field(
        "key").max_length, help_text="Empty: an event sent with no key.")
    payload = JSONField(required=False, label="data",
                        help_text="What wf.wait_for_event() returns (JSON).")
    idempotency_key = forms.CharField(
        required=False, max_length=WorkflowEvent._meta.get_field("idempotency_key").max_length,
        help_text="Optional: the same key sends nothing twice.")


class SendMessageForm(forms.Form):
    """A message to one run: its topic, its data, an idempotency key."""

    topic = forms.CharField(max_length=WorkflowMessage._meta.get_field("topic").max_length,
                            initial="default")
    payload = JSONField(required=False, label="data",
                        help_text="What wf.recv() returns (JSON).")
    idempotency_key = forms.CharField(
        required=False,
        max_length=WorkflowMessage._meta.get_field("idempotency_key").max_length,
        help_text="Optional: the same key sends nothing twice.")


def send_event(request: HttpRequest, data: dict[str, Any]) -> operations.SendResult:
    """Send the form's event as the request's user."""
    return operations.send_event(
        data["event"], data.get("payload"), key=data.get("key") or None,
        idempotency_key=data.get("idempotency_key") or None, sent_by=request.user)


def sent_text(kind: str, result: operations.SendResult) -> str:
    """The success message of a send."""
    what = f"Event {result.id}" if kind == "event" else f"Message {result.id}"
    if not result.created:
        return f"{what} was already sent with this idempotency key: nothing sent again."
    return f"{what} sent; it woke {result.woken} run(s)."


def refused(request: HttpRequest, exc: WorkflowError) -> None:
    detail = getattr(exc, "errors", None)
    messages.error(request, f"Send refused: {exc}"
                   + (f" {detail}" if isinstance(exc, WorkflowInputError) and detail else ""))


class RunWaitsMixin(_RunAdminBase):
    """The run page's "send the event" and "send a message" forms (put before the
    ModelAdmin in the bases)."""

    def get_urls(self) -> list[URLPattern]:
        return object_urls(self, {"send_event": self.send_event_view,
                                  "send_message": self.send_message_view}) + super().get_urls()

    def _waiting_run(self, request: HttpRequest, object_id: str) -> WorkflowRun:
        if not (request.user.is_active and request.user.is_staff and request.user.has_perm(
                "pikku_workflows.view_workflowrun")):
            raise PermissionDenied
        run = WorkflowRun.objects.select_related("owner").filter(pk=object_id).first() \
            if is_uuid(object_id) else None
        if run is None:
            raise Http404(f"No run has the id {object_id!r}.")
        return run

    def wait_context(self, request: HttpRequest, run: WorkflowRun) -> dict[str, object]:
        """What the run page shows of the run's wait and its messages, and its forms."""
        wait = run_wait(run)
        context: dict[str, object] = {"wait": wait, "unreceived": unreceived_messages(run),
                                      "waits": run_waits(run)}
        if wait is not None and wait.kind == "event" and may_send_event(request):
            context["send_event_form"] = SendEventForm(
                initial={"event": wait.name, "key": wait.key or ""})
            context["send_event_url"] = console_url(
                self.admin_site.name, "workflowrun_send_event", run.pk)
        # A message can go to any live run (it waits until received): the form is on the
        # page of a run that waits for one.
        if wait is not None and wait.kind == "message" and may_send_message(request, run):
            context["send_message_form"] = SendMessageForm(initial={"topic": wait.name})
            context["send_message_url"] = console_url(
                self.admin_site.name, "workflowrun_send_message", run.pk)
        return context

    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Send an event from a waiting run's page (``add_workflowevent``)."""
        run = self._waiting_run(request, object_id)
        if not may_send_event(request):
            raise PermissionDenied
        wait = run_wait(run)
        initial = {"event": wait.name, "key": wait.key or ""} if wait and \
            wait.kind == "event" else {}
        form = SendEventForm(request.POST if request.method == "POST" else None,
                             initial=initial)
        page = console_url(self.admin_site.name, "workflowrun_change", run.pk)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                result = send_event(request, data)
            except WorkflowError as exc:
                refused(request, exc)
                return HttpResponseRedirect(page)
            run_audit.record(request.user, run.pk, "send_event", via="console",
                             gate=data["event"], reason=_sent_reason(
                                 "event", data.get("key") or None, data.get("payload"), result))
            messages.success(request, sent_text("event", result))
            return HttpResponseRedirect(page)
        return self._send_page(request, run, form, "Send an event", page)

    def send_message_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Send a message to a run (``resume_workflowrun``, or the run's owner)."""
        run = self._waiting_run(request, object_id)
        if not may_send_message(request, run):
            raise PermissionDenied
        wait = run_wait(run)
        form = SendMessageForm(request.POST if request.method == "POST" else None, initial={
            "topic": wait.name if wait and wait.kind == "message" else "default"})
        page = console_url(self.admin_site.name, "workflowrun_change", run.pk)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                result = operations.send(
                    run.pk, data.get("payload"), topic=data["topic"],
                    idempotency_key=data.get("idempotency_key") or None, sent_by=request.user)
            except WorkflowError as exc:
                refused(request, exc)
                return HttpResponseRedirect(page)
            run_audit.record(request.user, run.pk, "send_message", via="console",
                             gate=data["topic"],
                             reason=_sent_reason("message", None, data.get("payload"), result))
            messages.success(request, sent_text("message", result))
            return HttpResponseRedirect(page)
        return self._send_page(request, run, form, "Send a message", page)

    def _send_page(self, request: HttpRequest, run: WorkflowRun, form: forms.Form,
                   title: str, page: str) -> HttpResponse:
        context = {**self.admin_site.each_context(request), "opts": self.opts, "run": run,
                   "form": form, "title": f"{title} to run {run.pk}"
                   if title == "Send a message" else title, "run_url": page,
                   "wait": run_wait(run)}
        return TemplateResponse(request, "admin/pikku_workflows/actions/send.html", context)


def _sent_reason(what: str, key: str | None, data: UserJSON,
                 result: operations.SendResult) -> str:
    """An audit entry's reason: which event or message (its id), its key, its data."""
    parts = [f"{what} {result.id}" + ("" if result.created else " (sent before)")]
    if key is not None:
        parts.append(f"key {json.dumps(key)}")
    if data is not None:
        parts.append(run_audit.as_reason(data))
    return ", ".join(part for part in parts if part)
