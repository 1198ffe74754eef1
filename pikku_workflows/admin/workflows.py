"""The console's "Workflows" entry: every registered definition, its graph, versions and
runs by status, and a form to start a run (no table of its own, like django-rq's page)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from .. import operations, run_audit
from ..engine import store
from ..exceptions import WorkflowError, WorkflowInputError
from ..models import WorkflowRun, WorkflowVersion
from ..registry import registry
from ..status import RunStatus, VersionStatus
from .examples import example_input
from .graph_svg import definition_svg
from .mixins import ReadOnlyAdminMixin
from .urls import console_url

if TYPE_CHECKING:
    # Django's ModelAdmin takes no type argument at run time. Any model: the page logs
    # changes to versions and runs.
    _WorkflowAdminBase = admin.ModelAdmin[Model]
else:
    _WorkflowAdminBase = admin.ModelAdmin


class RegisteredWorkflowAdmin(ReadOnlyAdminMixin, _WorkflowAdminBase):
    """The changelist of the unmanaged ``RegisteredWorkflow`` model is this page."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        user = request.user
        return user.is_active and user.is_staff and (
            user.has_perm("pikku_workflows.view_registeredworkflow")
            or user.has_perm("pikku_workflows.view_workflowrun"))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def get_urls(self) -> list[URLPattern]:
        # The page is the changelist; the model has no rows, so no page of one row (their
        # URLs only redirected, before any permission check, to "does not exist").
        info = self.opts.app_label, self.opts.model_name
        return [path("", self.admin_site.admin_view(self.changelist_view),
                     name="{}_{}_changelist".format(*info))]

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._post(request)
        definitions = registry.workflows()
        versions: dict[str, list[WorkflowVersion]] = {}
        for version in WorkflowVersion.objects.order_by("workflow", "-created_at"):
            versions.setdefault(version.workflow, []).append(version)
        counts: dict[str, dict[str, int]] = {}
        for row in WorkflowRun.objects.order_by().values("workflow", "status").annotate(
                n=Count("id")):
            counts.setdefault(row["workflow"], {})[row["status"]] = row["n"]
        rows = [{
            "definition": d, "graph": definition_svg(d), "versions": versions.get(d.name, []),
            "example_input": example_input(d),
            "counts": [(s.label, counts.get(d.name, {}).get(s.value, 0)) for s in RunStatus],
            "runs_url": console_url(self.admin_site.name, "workflowrun_changelist")
                        + f"?workflow={d.name}",
        } for d in definitions]
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "title": "Workflows",
            "rows": rows, "version_statuses": VersionStatus.choices,
            "can_start": request.user.has_perm("pikku_workflows.start_workflowrun"),
            "can_set_status": request.user.has_perm("pikku_workflows.change_workflowversion"),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/pikku_workflows/workflows/index.html", context)

    def _post(self, request: HttpRequest) -> HttpResponse:
        here = console_url(self.admin_site.name, "registeredworkflow_changelist")
        if "version" in request.POST:
            if not request.user.has_perm("pikku_workflows.change_workflowversion"):
                raise PermissionDenied
            status = request.POST.get("status")
            version_id = request.POST.get("version", "")
            version = None
            if version_id.isascii() and version_id.isdigit():
                version = WorkflowVersion.objects.filter(pk=int(version_id)).first()
            if version is None or status not in VersionStatus.values:
                messages.error(request, "Unknown version or status.")
                return HttpResponseRedirect(here)
            store.set_version_status(version.pk, status)
            self.log_change(request, version, f"status set to {status}")
            messages.success(request, f"Version {version} is now {status}.")
            return HttpResponseRedirect(here)
        if not request.user.has_perm("pikku_workflows.start_workflowrun"):
            raise PermissionDenied
        name = request.POST.get("workflow", "")
        try:
            try:
                data = json.loads(request.POST.get("input") or "null")
            except RecursionError:
                raise ValueError("the input is nested too deeply") from None
            with operations.started_from({"type": "admin"}):
                run = operations.start_workflow(name, data, owner=request.user)
        except ValueError as exc:
            detail = getattr(exc, "errors", None) if isinstance(exc, WorkflowInputError) else None
            messages.error(request, f"Not started: {exc}" + (f" {detail}" if detail else ""))
            return HttpResponseRedirect(here)
        except WorkflowError as exc:
            messages.error(request, f"Not started: {exc}")
            return HttpResponseRedirect(here)
        run_audit.record(request.user, run.pk, "start", via="console")
        messages.success(request, f"Started {name}: run {run.pk} is {run.status}.")
        return HttpResponseRedirect(
            console_url(self.admin_site.name, "workflowrun_change", run.pk))
