"""The demo's start page: a button per example, a button that pays each order waiting for
its bank transfer, and where to look afterwards."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

from .workflows import EXAMPLES, PAYMENT_EVENT

#: The most orders waiting for their payment the page lists.
WAITING_SHOWN = 10


def waiting_for_payment() -> list[tuple[WorkflowRun, datetime | None]]:
    """The demo's orders waiting for their ``payment.succeeded`` event, newest first, with
    the time their wait ends."""
    runs = WorkflowRun.objects.filter(
        workflow="order_saga", status="suspended", error__code="WAITING_FOR_EVENT",
        error__event=PAYMENT_EVENT).order_by("-created_at")[:WAITING_SHOWN]
    return [(run, _until(run.error.get("timeout_at"))) for run in runs]


def _until(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _pay(request: HttpRequest, run_id: str) -> HttpResponse:
    """Send the ``payment.succeeded`` event a waiting order waits for, as its bank's
    webhook would."""
    if not request.user.has_perm("pikku_workflows.add_workflowevent"):
        messages.error(request, "Sending an event needs the permission add_workflowevent.")
        return redirect("shop:start")
    try:
        run = WorkflowRun.objects.get(pk=uuid.UUID(run_id))
    except (ValueError, WorkflowRun.DoesNotExist):
        messages.error(request, "Unknown order.")
        return redirect("shop:start")
    error = run.error if isinstance(run.error, dict) else {}
    if run.status != "suspended" or error.get("event") != PAYMENT_EVENT:
        messages.error(request, f"Run {run.pk} does not wait for its payment.")
        return redirect("shop:start")
    key = error.get("key")
    payment = {"order_id": run.input.get("order_id"), "amount": run.input.get("amount"),
               "via": "the demo's start page"}
    result = pw.send_event(PAYMENT_EVENT, payment, key=key, sent_by=request.user)
    messages.success(request, f"Sent {PAYMENT_EVENT} (key {key}): it woke {result.woken} "
                              f"run(s).")
    return redirect(reverse("admin:pikku_workflows_workflowrun_change", args=[run.pk]))


@staff_member_required
@require_http_methods(["GET", "POST"])
def start_page(request: HttpRequest) -> HttpResponse:
    """GET: the examples, the orders waiting for their payment and the latest runs; POST
    ``example=<n>``: start that example; POST ``pay=<run id>``: send its payment."""
    if request.method == "POST":
        if "pay" in request.POST:
            return _pay(request, request.POST["pay"])
        try:
            name, label, data = EXAMPLES[int(request.POST.get("example", ""))]
        except (ValueError, IndexError):
            messages.error(request, "Unknown example.")
            return redirect("shop:start")
        run = pw.start_workflow(name, data, owner=request.user)
        messages.success(request, f"Started {label}: run {run.pk} is {run.status}.")
        return redirect(reverse("admin:pikku_workflows_workflowrun_change", args=[run.pk]))
    executor = settings.PIKKU_WORKFLOWS.get("EXECUTOR", "inline")
    return render(request, "shop/start.html", {
        # The input as JSON, as pikku_start and the REST API take it.
        "examples": [(index, name, label, json.dumps(data))
                     for index, (name, label, data) in enumerate(EXAMPLES)],
        "waiting": waiting_for_payment(),
        "runs": WorkflowRun.objects.select_related("owner").order_by("-created_at")[:10],
        "executor": executor,
    })
