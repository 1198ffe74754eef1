"""The console's Limits page: each named step limit (its setting, its override, the slots
in use, the steps waiting and the oldest wait) and the workflow concurrency per workflow
and key; overrides edited behind ``change_workflowlimit``, each change logged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Exists, Min, OuterRef, Q
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.http import urlencode

from ..conf import pikku_settings
from ..durations import parse_rate
from ..engine import flow
from ..engine.clock import clock
from ..models import WorkflowLimit, WorkflowLimitSlot, WorkflowRun, WorkflowStep
from ..status import RunStatus, StepStatus
from .mixins import HistoryGuardMixin
from .urls import console_url

if TYPE_CHECKING:
    # Django's ModelAdmin and ModelForm take no type argument at run time.
    _LimitAdminBase = admin.ModelAdmin[WorkflowLimit]
    _LimitFormBase = forms.ModelForm[WorkflowLimit]
else:
    _LimitAdminBase = admin.ModelAdmin
    _LimitFormBase = forms.ModelForm

#: The most (workflow, key) rows the workflow concurrency table shows, most waiting first.
CONCURRENCY_ROWS = 200
#: The run fields of workflow concurrency (``Concurrency`` on workflows) the second table
#: reads, when the runs have them.
_RUN_FIELDS = {"concurrency_key", "waiting_for", "waiting_since"}


class LimitForm(_LimitFormBase):
    """An override: a limit ``LIMITS`` declares, a concurrency of at least 1, a rate that
    parses; empty fields fall back to the setting."""

    concurrency = forms.IntegerField(required=False, min_value=1,
                                     help_text="At most this many attempts at once; empty: "
                                               "the setting's value.")

    class Meta:
        model = WorkflowLimit
        fields = ["name", "concurrency", "rate"]

    def clean_name(self) -> str:
        name = str(self.cleaned_data.get("name") or "")
        if name not in pikku_settings.LIMITS:
            declared = ", ".join(sorted(pikku_settings.LIMITS)) or "none"
            raise forms.ValidationError(
                f"PIKKU_WORKFLOWS['LIMITS'] declares no limit {name!r} (declared: "
                f"{declared}): an override of it would limit nothing")
        return name

    def clean_rate(self) -> str | None:
        rate = (self.cleaned_data.get("rate") or "").strip()
        if not rate:
            return None
        try:
            parse_rate(rate)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return rate


def _rate_text(spec: dict[str, Any] | None) -> str:
    return str((spec or {}).get("rate") or "")


def limit_rows() -> list[dict[str, Any]]:
    """One row per named limit (declared or overridden): setting, override, slots in use,
    steps waiting and when the oldest began to wait (three grouped queries)."""
    now = clock().now()
    overrides = {o.name: o for o in WorkflowLimit.objects.select_related("updated_by")}
    in_use = dict(WorkflowLimitSlot.objects.filter(kind="c", until__gt=now).values(
        "name").annotate(n=Count("id")).values_list("name", "n"))
    waiting: dict[str, dict[str, Any]] = {
        row["waiting_for_limit"]: dict(row) for row in WorkflowStep.objects.filter(
        status=StepStatus.SCHEDULED).exclude(waiting_for_limit="").values(
        "waiting_for_limit").annotate(n=Count("id"), oldest=Min("waiting_since")).order_by()}
    rows = []
    for name in sorted(set(pikku_settings.LIMITS) | set(overrides)):
        spec = pikku_settings.LIMITS.get(name)
        override = overrides.get(name)
        wait: dict[str, Any] = waiting.get(name, {})
        oldest = wait.get("oldest")
        rows.append({
            "name": name, "declared": spec is not None,
            "setting_concurrency": (spec or {}).get("concurrency"),
            "setting_rate": _rate_text(spec),
            "override": override,
            "in_use": in_use.get(name, 0), "waiting": wait.get("n", 0),
            "oldest_wait": oldest, "oldest_wait_seconds":
                int((now - oldest).total_seconds()) if oldest is not None else None,
        })
    return rows


def has_workflow_concurrency() -> bool:
    """Whether the runs carry workflow concurrency's fields (``Concurrency``)."""
    return {f.name for f in WorkflowRun._meta.get_fields()} >= _RUN_FIELDS


def workflow_concurrency_rows() -> list[dict[str, Any]]:
    """Per (workflow, key): runs holding a slot (running or suspended, but not suspended
    for an operator nor a child run under its parent's slot: ``flow.holders``' rule), runs
    waiting for one (``scheduled``, ``waiting_for`` "concurrency") and when the one waiting
    longest began to wait (its ``waiting_since``)."""
    if not has_workflow_concurrency():
        return []
    now = clock().now()
    live = (RunStatus.RUNNING, RunStatus.SUSPENDED)
    holds = Q(status__in=live)
    # The live runs that hold no slot, counted apart and taken off (a negated JSON key
    # lookup would drop NULL errors too).
    under_parent = Exists(WorkflowRun.objects.filter(
        pk=OuterRef("parent_run_id"), workflow=OuterRef("workflow"),
        concurrency_key=OuterRef("concurrency_key"), status__in=live))
    slotless = (Q(status=RunStatus.SUSPENDED, error__code__in=sorted(flow.OPERATOR_WAITS))
                | (holds & Q(under_parent)))
    # The fields by name: a version without workflow concurrency lacks them (above).
    waits = Q(status=RunStatus.SCHEDULED, **{"waiting_for": "concurrency"})
    keyed: dict[str, Any] = {"concurrency_key__isnull": False}
    grouping = ("workflow", "concurrency_key")
    rows = list(
        WorkflowRun.objects.filter(holds | waits, **keyed)
        .values(*grouping)
        .annotate(held=Count("id", filter=holds), slotless=Count("id", filter=slotless),
                  waiting=Count("id", filter=waits),
                  oldest=Min("waiting_since", filter=waits))
        .order_by("-waiting", "workflow", "concurrency_key")[:CONCURRENCY_ROWS])
    for row in rows:
        row["in_use"] = row.pop("held") - row.pop("slotless")
        row["oldest_wait_seconds"] = (int((now - row["oldest"]).total_seconds())
                                      if row["oldest"] is not None else None)
    return rows


class WorkflowLimitAdmin(HistoryGuardMixin, _LimitAdminBase):
    """The changelist is the Limits page; the add and change forms edit an override."""

    form = LimitForm
    change_list_template = "admin/pikku_workflows/workflowlimit/limits.html"

    def get_readonly_fields(self, request: HttpRequest, obj: WorkflowLimit | None = None
                            ) -> list[str]:
        return ["name"] if obj is not None else []

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"name": request.GET.get("name", "")[:100]}

    def save_model(self, request: HttpRequest, obj: WorkflowLimit, form: Any,
                   change: bool) -> None:
        obj.updated_by = request.user if request.user.is_authenticated else None
        super().save_model(request, obj, form, change)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        self._may_view(request)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_delete_permission(request):
            raise PermissionDenied
        return super().delete_view(request, object_id, extra_context)

    def _may_view(self, request: HttpRequest) -> None:
        # Refused before the override is looked up: Django's views redirect for an
        # unknown id first, which would tell staff without the permission which ids exist.
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        may_change = self.has_change_permission(request)
        may_add = self.has_add_permission(request)
        rows = limit_rows()
        for row in rows:
            override = row["override"]
            if override is not None and may_change:
                row["edit_url"] = console_url(self.admin_site.name, "workflowlimit_change",
                                              override.pk)
            elif override is None and may_add and row["declared"]:
                row["edit_url"] = console_url(self.admin_site.name, "workflowlimit_add") + \
                    "?" + urlencode({"name": row["name"]})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": "Limits", "limits": rows,
            "has_workflow_concurrency": has_workflow_concurrency(),
            "workflow_concurrency": workflow_concurrency_rows(),
            **(extra_context or {}),
        }
        return TemplateResponse(request, self.change_list_template, context)
