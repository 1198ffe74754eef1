"""The console's Dashboard page: runs over time, durations, failing steps, latency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.http import urlencode

from ..models import RunDashboard
from .dashboard_data import DEFAULT_SPAN, SPANS, dashboard
from .dashboard_svg import runs_chart, with_bars
from .mixins import ReadOnlyAdminMixin, StaffViewMixin
from .urls import console_url

if TYPE_CHECKING:
    # Django's ModelAdmin takes no type argument at run time.
    _DashboardAdminBase = admin.ModelAdmin[RunDashboard]
else:
    _DashboardAdminBase = admin.ModelAdmin

#: The query parameter that picks the window.
SPAN_PARAMETER = "span"


class RunDashboardAdmin(ReadOnlyAdminMixin, StaffViewMixin, _DashboardAdminBase):
    """The changelist of the ``RunDashboard`` proxy is the page: staff who may view runs
    see it (and its entry on the admin index); it shows figures, never a row to edit."""

    view_permission = "pikku_workflows.view_workflowrun"

    def get_urls(self) -> list[URLPattern]:
        # The page only: the proxy's rows are runs, which have their own pages.
        info = self.opts.app_label, self.opts.model_name
        return [path("", self.admin_site.admin_view(self.changelist_view),
                     name="{}_{}_changelist".format(*info))]

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        asked = request.GET.get(SPAN_PARAMETER, DEFAULT_SPAN)
        span = SPANS.get(asked)
        status = 200
        error = ""
        if span is None:
            span, status = SPANS[DEFAULT_SPAN], 400
            error = (f"Unknown span {asked[:40]!r}: choose one of "
                     f"{', '.join(SPANS)}. Showing {SPANS[DEFAULT_SPAN].label.lower()}.")
        figures = dashboard(span)
        here = console_url(self.admin_site.name, "rundashboard_changelist")
        runs_url = console_url(self.admin_site.name, "workflowrun_changelist")
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "title": "Dashboard",
            **figures, "span": span, "span_error": error,
            "spans": [{"key": s.key, "label": s.label, "selected": s is span,
                       "url": f"{here}?{urlencode({SPAN_PARAMETER: s.key})}"}
                      for s in SPANS.values()],
            "chart": runs_chart(figures["window"]),
            "run_rows": with_bars(figures["runs"]), "step_rows": with_bars(figures["steps"]),
            "latency_rows": with_bars(figures["latency"]),
            "pass_rows": [{**bars, "queue": figures["queues"][row.name]} for bars, row in zip(
                with_bars(figures["pass_latency"]), figures["pass_latency"], strict=True)],
            "zone": timezone.get_current_timezone_name(),
            "runs_url": runs_url,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/pikku_workflows/rundashboard/dashboard.html",
                                context, status=status)
