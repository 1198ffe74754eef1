"""The demo's start page: a button per example, and where to look afterwards."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

from .workflows import EXAMPLES


@staff_member_required
@require_http_methods(["GET", "POST"])
def start_page(request: HttpRequest) -> HttpResponse:
    """GET: the examples and the latest runs; POST ``example=<n>``: start that example."""
    if request.method == "POST":
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
        "runs": WorkflowRun.objects.select_related("owner").order_by("-created_at")[:10],
        "executor": executor,
    })
