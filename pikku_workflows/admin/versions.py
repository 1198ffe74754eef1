"""Admin pages for workflow versions: the list, and a version's page with its graph, a
comparison with another version of the workflow, the runs that started on it and, per
patch of the deployed code, the live runs still without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..models import WorkflowRun, WorkflowVersion
from ..replay_checks import PatchesOfWorkflow, live_runs_without_patches
from ..status import WorkflowSource
from .graph_svg import draw, layout_for
from .mixins import ReadOnlyAdminMixin
from .urls import console_url
from .version_diff import compare

if TYPE_CHECKING:
    # Django's ModelAdmin takes no type argument at run time.
    _VersionAdminBase = admin.ModelAdmin[WorkflowVersion]
else:
    _VersionAdminBase = admin.ModelAdmin

#: Runs listed on a version's page at a time (no count: one more is read to know of a
#: next page).
RUNS_PER_PAGE = 20
#: Live runs a version's page replays (dry) to list those without each patch.
PATCH_CHECK_LIMIT = 1000
#: Runs listed under each patch (the rest are counted).
PATCH_RUNS_SHOWN = 20


def version_svg(version: WorkflowVersion) -> str:
    """The drawing of a stored version's graph (cached per version, as the run page's)."""
    graph = {"nodes": version.graph.get("nodes") or [], "edges": version.graph.get("edges") or []}
    if not graph["nodes"]:
        return ""
    layout = layout_for(version.workflow, version.graph_hash, graph)
    return draw(layout, title=f"{version.workflow} ({version.graph_hash})")


class WorkflowVersionAdmin(ReadOnlyAdminMixin, _VersionAdminBase):
    list_display = ("workflow", "graph_hash", "source", "status", "created_at")
    list_filter = ("source", "status", "workflow")
    search_fields = ("workflow", "graph_hash")
    readonly_fields = ("workflow", "graph_hash", "source", "status", "graph", "created_at")

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        version = WorkflowVersion.objects.filter(pk=int(object_id)).first() \
            if object_id.isascii() and object_id.isdigit() and len(object_id) < 19 else None
        if version is None:
            raise Http404(f"No version has the id {object_id!r}.")
        others = list(WorkflowVersion.objects.filter(workflow=version.workflow)
                      .exclude(pk=version.pk).order_by("-created_at")
                      .values("pk", "graph_hash", "created_at", "status"))
        wanted = request.GET.get("compare", "")
        other = None
        if wanted.isascii() and wanted.isdigit() and any(o["pk"] == int(wanted) for o in others):
            other = WorkflowVersion.objects.get(pk=int(wanted))
        context = {
            **self.admin_site.each_context(request), "opts": self.opts,
            "title": f"{version.workflow} version {version.graph_hash}",
            "has_view_permission": True, "version": version, "graph": version_svg(version),
            "others": others, "other": other,
            # Older on the left: what the newer version adds, removes and changes.
            "diff": self._diff(version, other) if other is not None else None,
            **self._runs(request, version), "patches": self._patches(request, version),
            **(extra_context or {}),
        }
        return TemplateResponse(
            request, "admin/pikku_workflows/workflowversion/version_page.html", context)

    @staticmethod
    def _diff(version: WorkflowVersion, other: WorkflowVersion) -> dict[str, Any]:
        old, new = sorted((version, other), key=lambda v: (v.created_at, v.pk))
        return {"old": old, "new": new, "changes": compare(old.graph, new.graph),
                "other_graph": version_svg(other)}

    @staticmethod
    def _patches(request: HttpRequest, version: WorkflowVersion) -> dict[str, Any] | None:
        """Per patch of the workflow's deployed code, the live runs that take its old
        path (a dry replay of each: nothing is called or written)."""
        if version.source != WorkflowSource.DSL or \
                not request.user.has_perm("pikku_workflows.view_workflowrun"):
            return None
        found: PatchesOfWorkflow = live_runs_without_patches(
            version.workflow, limit=PATCH_CHECK_LIMIT)
        return {"checked": found.checked, "more": found.more, "patches": [
            {"patch_id": patch.patch_id, "without": len(patch.runs_without),
             "shown": patch.runs_without[:PATCH_RUNS_SHOWN],
             "hidden": max(len(patch.runs_without) - PATCH_RUNS_SHOWN, 0)}
            for patch in found.patches]}

    def _runs(self, request: HttpRequest, version: WorkflowVersion) -> dict[str, Any]:
        if not request.user.has_perm("pikku_workflows.view_workflowrun"):
            return {"runs": None}
        page_text = request.GET.get("runs", "1")
        page = int(page_text) if page_text.isascii() and page_text.isdigit() \
            and 0 < len(page_text) < 7 else 1
        page = max(page, 1)
        start = (page - 1) * RUNS_PER_PAGE
        rows = list(WorkflowRun.objects.filter(
            workflow=version.workflow, graph_hash=version.graph_hash).order_by("-created_at")
            .only("pk", "status", "created_at", "finished_at")[start:start + RUNS_PER_PAGE + 1])

        def link(number: int) -> str:
            params = request.GET.copy()
            params["runs"] = str(number)
            return "?" + params.urlencode()

        runs_list = console_url(self.admin_site.name, "workflowrun_changelist") + "?" + urlencode(
            {"workflow": version.workflow, "graph_hash": version.graph_hash})
        return {"runs": rows[:RUNS_PER_PAGE], "runs_page": page,
                "runs_next": link(page + 1) if len(rows) > RUNS_PER_PAGE else None,
                "runs_previous": link(page - 1) if page > 1 else None,
                "runs_list_url": runs_list}
