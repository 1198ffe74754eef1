"""The runs list, its triage lists, and the run page: graph, timeline, steps, live refresh."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Prefetch, Q, QuerySet, Sum
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

from ..content_search import (
    ContentQueryError,
    filter_contains,
    looks_like_content_search,
    parse_search,
)
from ..engine.summary import is_graph_run, public_error, step_duration_ms, step_names
from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..operations import flow_wait
from ..paging import BoundedCountPaginator, bounded_count
from ..registry import registry
from ..run_audit import run_audit
from ..status import RunStatus, StepStatus, waits_to_retry
from ..step_keys import (
    APPROVAL_PREFIX,
    COMPENSATION_SUFFIX,
    approval_wait,
    public_step_name,
    step_label,
)
from .actions import (
    AT_APPROVAL_GATE,
    NOT_AT_APPROVAL_GATE,
    NOT_WAITING_TO_RECEIVE,
    WAITING_FOR,
    RunActionsMixin,
)
from .failures import body_failure
from .graph_svg import OVERLAY_FIELDS, run_svg, step_anchor
from .history import run_history_json
from .mixins import ReadOnlyAdminMixin, StaffViewMixin
from .step_list import step_page
from .timeline import PAGE_PARAMETER as TIMELINE_PAGE
from .timeline import timeline_svg
from .urls import console_url
from .waits import RunWaitsMixin, run_wait
from .workers import WORKERS_VIEW, WorkersPageMixin, worker_banner

if TYPE_CHECKING:
    # Django's ModelAdmin takes no type argument at run time.
    _RunAdminBase = admin.ModelAdmin[WorkflowRun]
else:
    _RunAdminBase = admin.ModelAdmin

#: The most forks a run page lists (newest first).
FORKS_SHOWN = 20
#: The instance suffix of a step key: a repeat (``Charge#1``) or a for_each item (``n[2]``).
_INSTANCE = re.compile(r"(?:#\d+|\[\d+\])+$")


def _wait_word(step: WorkflowStep, run: WorkflowRun) -> str:
    """What a step's ``wake_at`` means, or "" when it means nothing any more: a gate's
    expiry (gone once decided), a failed attempt's next one, a sleep's or a wait's end."""
    if step.wake_at is None or step.status == StepStatus.SUCCEEDED:
        return ""
    if step.step_name.startswith(APPROVAL_PREFIX):
        return "expires"
    if step.status == StepStatus.FAILED:
        return "retrying at" if waits_to_retry(step.status, step.wake_at, run.status) else ""
    if step.status == StepStatus.SCHEDULED and step.waiting_for_limit:
        return f"waiting for limit {step.waiting_for_limit}: next try at"
    return "wakes"


def pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


# --- list filters (none of them scans the table for its choices) ----------------------------


class WorkflowFilter(admin.SimpleListFilter):
    """Choices from the registry, not a DISTINCT over every run."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: object) -> list[tuple[str, str]]:
        return [(d.name, d.name) for d in registry.workflows()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                 ) -> QuerySet[WorkflowRun]:
        return queryset.filter(workflow=self.value()) if self.value() else queryset


class GraphHashFilter(admin.SimpleListFilter):
    """``?graph_hash=<hash>``: the runs of one definition version (the link of a version's
    page); shown in the sidebar only while it is in use."""

    title = "version"
    parameter_name = "graph_hash"

    def lookups(self, request: HttpRequest, model_admin: object) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value[:12])] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                 ) -> QuerySet[WorkflowRun]:
        return queryset.filter(graph_hash=self.value()) if self.value() else queryset


class OwnerFilter(admin.SimpleListFilter):
    """Mine, nobody's, or any user id given as ``?owner=<id>`` (no list of every user)."""

    title = "owner"
    parameter_name = "owner"

    def lookups(self, request: HttpRequest, model_admin: object) -> list[tuple[str, str]]:
        return [("me", "Me"), ("none", "Nobody")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                 ) -> QuerySet[WorkflowRun]:
        value = self.value()
        if value == "me":
            return queryset.filter(owner_id=request.user.pk)
        if value == "none":
            return queryset.filter(owner__isnull=True)
        if value and value.isascii() and value.isdigit():
            # An id no column can hold matches nobody (the driver would overflow).
            return queryset.filter(owner_id=int(value)) if int(value) < 2**63 \
                else queryset.none()
        return queryset


#: The triage lists of runs waiting to receive something (DESIGN 1.1: waits have their
#: own lists): ``?waiting=<kind>`` of the runs list, and their titles.
WAIT_LISTS = {"event": "Waiting for an event", "message": "Waiting for a message"}


class WaitingForFilter(admin.SimpleListFilter):
    """``?waiting=event`` or ``?waiting=message``: the runs suspended waiting for one (the
    triage lists "Waiting for an event" and "Waiting for a message")."""

    title = "waiting for"
    parameter_name = "waiting"

    def lookups(self, request: HttpRequest, model_admin: object) -> list[tuple[str, str]]:
        return [("event", "An event"), ("message", "A message")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                 ) -> QuerySet[WorkflowRun]:
        condition = WAITING_FOR.get(self.value() or "")
        return queryset.filter(condition) if condition is not None else queryset


def wait_lists(site: str) -> list[dict[str, object]]:
    """The waiting triage lists with their counts (bounded: at most 1,000 rows read),
    linked on the admin site named ``site``."""
    changelist = console_url(site, "workflowrun_changelist")
    found = []
    for kind, title in WAIT_LISTS.items():
        count, exact = bounded_count(WorkflowRun.objects.filter(WAITING_FOR[kind]))
        found.append({"kind": kind, "title": title, "count": count, "exact": exact,
                      "url": f"{changelist}?{urlencode({'waiting': kind})}"})
    return found


class RunChangeList(ChangeList):
    """Adds each shown run's step counts with one aggregate query for the page."""

    def _get_deterministic_ordering(self, ordering: list[str]) -> list[str]:
        # Django appends "-pk" to an ordering with no unique field, which no index of ours
        # covers: the database would sort every matching run to show 100. created_at has
        # microseconds, so ties are rare enough not to pay for that.
        return ordering

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Any: the counts become attributes of the rows, for the template.
        runs: list[Any] = list(self.result_list)
        counts: dict[uuid.UUID, Mapping[str, object]] = {
            row["run_id"]: row for row in WorkflowStep.objects.filter(
            run_id__in=[run.pk for run in runs]).values("run_id").annotate(
            total=Count("id"), done=Count("id", filter=Q(status=StepStatus.SUCCEEDED)),
            retries=Sum(F("attempt_count") - 1, filter=Q(attempt_count__gt=1)))}
        for run in runs:
            row = counts.get(run.pk, {})
            run.steps_total = row.get("total", 0)
            run.steps_done = row.get("done", 0)
            run.retry_count = row.get("retries") or 0
        self.result_list = runs
        self.count_is_exact = getattr(self.paginator, "count_is_exact", True)


# --- the runs list -----------------------------------------------------------------------------


class RunListAdmin(RunActionsMixin, RunWaitsMixin, StaffViewMixin, ReadOnlyAdminMixin,
                   _RunAdminBase):
    """The columns, filters and search every runs list shares."""

    view_permission = "pikku_workflows.view_workflowrun"

    list_display: tuple[str, ...] = (
        "short_id", "status_pill", "workflow", "version", "owner", "created_at", "finished_at",
        "duration", "steps", "retries")
    list_display_links = ("short_id",)
    list_filter = ("status", WaitingForFilter, WorkflowFilter, OwnerFilter, GraphHashFilter)
    date_hierarchy = "created_at"
    search_fields = ("workflow",)
    search_help_text = (
        "A run id (or its first characters), a workflow name, or the run's content: "
        "key=value parts, all matching: order_id=8 customer.email=ada@example.com "
        "output.total=12 (values read as JSON when they parse: \"8\" for the text).")
    show_full_result_count = False
    paginator = BoundedCountPaginator
    list_per_page = 100
    list_select_related = ("owner",)
    ordering = ("-created_at",)
    change_list_template = "admin/pikku_workflows/workflowrun/change_list.html"

    def get_changelist(self, request: HttpRequest, **kwargs: object) -> type[ChangeList]:
        return RunChangeList

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[WorkflowRun],
                           search_term: str) -> tuple[QuerySet[WorkflowRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if looks_like_content_search(term):
            try:
                patterns = parse_search(term)
            except ContentQueryError as exc:
                messages.error(request, f"Search by content: {exc}.")
                return queryset.none(), False
            for field, pattern in patterns.items():
                queryset = filter_contains(queryset, field, pattern)
            return queryset, False
        # An id or its prefix becomes a primary-key range; a name, an exact match: both
        # use an index, where Django's icontains would read every row.
        hex_digits = term.replace("-", "").lower()
        condition = Q(workflow=term)
        if 0 < len(hex_digits) <= 32 and all(c in "0123456789abcdef" for c in hex_digits):
            low = uuid.UUID(hex_digits.ljust(32, "0"))
            high = uuid.UUID(hex_digits.ljust(32, "f"))
            condition |= Q(pk__gte=low, pk__lte=high)
        return queryset.filter(condition), False

    def get_list_display(self, request: HttpRequest
                         ) -> tuple[str | Callable[[WorkflowRun], str | bool], ...]:
        shown = tuple(super().get_list_display(request))
        if request.GET.get(WaitingForFilter.parameter_name) in WAIT_LISTS:
            return (*shown, "waits_for")
        return shown

    @admin.display(description="waiting for")
    def waits_for(self, run: WorkflowRun) -> str:
        wait = run_wait(run)
        return render_to_string("admin/pikku_workflows/workflowrun/_wait.html",
                                {"wait": wait}) if wait else ""

    @admin.display(description="run", ordering="id")
    def short_id(self, run: WorkflowRun) -> str:
        return str(run.pk)[:8]

    @admin.display(description="status", ordering="status")
    def status_pill(self, run: WorkflowRun) -> str:
        return format_html('<span class="pk-pill pk-{}" data-run-status="{}">{}</span>',
                           run.status, run.status, run.get_status_display())

    @admin.display(description="version")
    def version(self, run: WorkflowRun) -> str:
        return run.graph_hash[:7]

    @admin.display(description="duration")
    def duration(self, run: WorkflowRun) -> str:
        if run.finished_at is None:
            return "-"
        seconds = (run.finished_at - run.created_at).total_seconds()
        return f"{seconds:.1f} s" if seconds < 120 else str(timedelta(seconds=round(seconds)))

    @admin.display(description="steps")
    def steps(self, run: WorkflowRun) -> str:
        return f"{getattr(run, 'steps_done', 0)}/{getattr(run, 'steps_total', 0)}"

    @admin.display(description="retries")
    def retries(self, run: WorkflowRun) -> int:
        return getattr(run, "retry_count", 0)

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        site = self.admin_site.name
        context: dict[str, Any] = {"worker_banner": worker_banner(site),
                                   "wait_lists": wait_lists(site),
                                   "workers_url": console_url(site, WORKERS_VIEW)}
        if request.GET.get(WaitingForFilter.parameter_name) in WAIT_LISTS:
            context["title"] = WAIT_LISTS[request.GET[WaitingForFilter.parameter_name]]
            context["waiting_list"] = request.GET[WaitingForFilter.parameter_name]
        return super().changelist_view(request, extra_context={**context,
                                                               **(extra_context or {})})

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [path("<path:object_id>/live/", self.admin_site.admin_view(self.live_view),
                     name="{}_{}_live".format(*info)),
                path("<path:object_id>/history.json",
                     self.admin_site.admin_view(self.download_view),
                     name="{}_{}_download".format(*info)), *super().get_urls()]

    # --- the run page -------------------------------------------------------------------

    def _run(self, request: HttpRequest, object_id: str) -> WorkflowRun:
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            run = WorkflowRun.objects.select_related("owner", "forked_by", "schedule").get(
                pk=uuid.UUID(object_id))
        except (ValueError, WorkflowRun.DoesNotExist):
            raise Http404(f"No run has the id {object_id!r}.") from None
        return run

    def _page_context(self, request: HttpRequest, run: WorkflowRun) -> dict[str, object]:
        """What the run page and its live refresh show: a bounded number of queries."""
        steps = WorkflowStep.objects.filter(run=run).order_by("id")
        page, step_list = step_page(request, run)
        # Any: the template's extras become attributes of the rows.
        shown: list[Any] = list(WorkflowStep.objects.filter(pk__in=list(page)).order_by(
            "id").prefetch_related(
            Prefetch("attempts", queryset=StepAttempt.objects.order_by("attempt"))))
        graph = is_graph_run(run.workflow, run.graph_hash)
        fork_url = (console_url(self.admin_site.name, "workflowrun_fork", run.pk)
                    if run.is_forkable and self._allowed(request, "fork") else "")
        for step in shown:
            step.anchor = step_anchor(step.step_name)
            step.kept = run.kept_step(step)
            step.rerun_url = (f"{fork_url}?{urlencode({'from_step': step.step_name})}"
                              if fork_url else "")
            # The user's own name and the kind, never the engine's key (__workflow_...).
            names = step_names(step.step_name, rpc_name=step.rpc_name,
                               child_run=step.child_run_id, data=step.data, graph=graph)
            step.label, step.kind = names["label"], names["kind"]
            step.public_name = names["name"]
            instance = _INSTANCE.search(step.step_name.removesuffix(COMPENSATION_SUFFIX))
            step.instance = instance.group(0) if instance else ""  # "#1", "[2]"
            step.wait_word = _wait_word(step, run)
            step.attempt_list = list(step.attempts.all())
            step.duration_ms = step_duration_ms(step, step.attempt_list)
            for attempt in step.attempt_list:
                attempt.error_text = pretty_json(attempt.error) if attempt.error else ""
            step.data_json = pretty_json(step.data)
            step.result_json = pretty_json(step.result)
            step.error_json = pretty_json(step.error) if step.error else ""
        overlay_steps = list(steps.only(*OVERLAY_FIELDS))
        return {
            "run": run, "steps_page": page, "steps": shown, **step_list,
            "graph": run_svg(run, overlay_steps, rerun_url=(
                (lambda key: f"{fork_url}?{urlencode({'from_step': key})}") if fork_url
                else None), site=self.admin_site.name),
            "forks": list(run.forks.order_by("-created_at").values_list(
                "pk", "status", "fork_step")[:FORKS_SHOWN]),
            "forked_by": (run.forked_by.get_username() if run.forked_by_id and run.forked_by
                          else ""),
            "fork_step_name": public_step_name(run.fork_step) if run.fork_step else "",
            "timeline": timeline_svg(run, request.GET.get(TIMELINE_PAGE), request.GET),
            "input_json": pretty_json(run.input), "output_json": pretty_json(run.output),
            # The traceback shows formatted in the summary, not as one escaped JSON string;
            # the step by its public name and the code as the API says them.
            "error_json": pretty_json(
                {**{k: v for k, v in run.error.items() if k != "traceback"},
                 **(public_error(run.error) or {})}
                if isinstance(run.error, dict) else run.error),
            "state_json": pretty_json(run.state),
            "terminal": run.is_terminal, "body_failure": body_failure(run),
            "flow_wait": flow_wait(run),
            "audit": run_audit(run),
            "approval_gate": (step_label(gate) if run.status == RunStatus.SUSPENDED
                              and (gate := approval_wait(run.error)) else ""),
            "live_url": console_url(self.admin_site.name, "workflowrun_live", run.pk),
            "download_url": console_url(self.admin_site.name, "workflowrun_download", run.pk),
            **self.wait_context(request, run),
        }

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        run = self._run(request, object_id)
        context = {
            **self.admin_site.each_context(request), "opts": self.opts,
            "title": f"{run.workflow} {run.pk}",
            "has_view_permission": True, **self._page_context(request, run),
            **self.get_action_context(request, run), **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/pikku_workflows/workflowrun/run_page.html",
                                context)

    def live_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """The small JSON the run page polls while the run is live."""
        run = self._run(request, object_id)
        context = self._page_context(request, run)
        return JsonResponse({
            "status": run.status, "updated_at": run.updated_at.isoformat(),
            "terminal": run.is_terminal, "graph": context["graph"],
            "timeline": context["timeline"],
            "summary": render_to_string("admin/pikku_workflows/workflowrun/_summary.html",
                                        context, request=request),
            "steps": render_to_string("admin/pikku_workflows/workflowrun/_steps.html",
                                      context, request=request),
            "audit": render_to_string("admin/pikku_workflows/workflowrun/_audit.html",
                                      context, request=request),
            # The actions follow the status: a run that completed offers no Cancel.
            "tools": render_to_string("admin/pikku_workflows/run_object_tools.html",
                                      self.get_action_context(request, run), request=request),
        })


    def download_view(self, request: HttpRequest, object_id: str) -> StreamingHttpResponse:
        """The run's history as one JSON file: ``{"run", "steps", "attempts"}``, in the
        REST API's shapes (the run detail, ``runs/{id}/steps/``, ``runs/{id}/history/``).
        Streamed in batches: a run of a million steps never sits in memory at once."""
        run = self._run(request, object_id)
        response = StreamingHttpResponse(run_history_json(run),
                                         content_type="application/json")
        response["Content-Disposition"] = (
            f'attachment; filename="{run.workflow}-{run.pk}.json"')
        return response


class WorkflowRunAdmin(WorkersPageMixin, RunListAdmin):
    """Every run; the Workers and queues page beside them."""


class FailedRunAdmin(RunListAdmin):
    """Triage: the runs that failed."""

    list_filter = (WorkflowFilter, OwnerFilter, GraphHashFilter)  # type: ignore[assignment]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return super().get_queryset(request).filter(status=RunStatus.FAILED)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(
            console_url(self.admin_site.name, "workflowrun_change", object_id))


class SuspendedRunAdmin(FailedRunAdmin):
    """Triage: suspended runs that need an operator (DESIGN 1.1: ``WORKFLOW_SUSPENDED``,
    ``RPC_NOT_FOUND``, ``VERSION_CONFLICT``); runs waiting for an approval, an event or a
    message have their own lists."""

    list_display = (*RunListAdmin.list_display, "waiting_for")

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return RunListAdmin.get_queryset(self, request).filter(
            NOT_AT_APPROVAL_GATE, NOT_WAITING_TO_RECEIVE, status=RunStatus.SUSPENDED)

    @admin.display(description="waiting for")
    def waiting_for(self, run: WorkflowRun) -> str:
        message: str = (run.error or {}).get("message", "")  # the engine writes text
        return message


class ApprovalWaitingRunAdmin(SuspendedRunAdmin):
    """Triage: runs suspended at an approval gate (``WAITING_FOR_APPROVAL``, or the
    ``WORKFLOW_SUSPENDED`` of older releases at a gate), with the gate's reason. They are
    approved, rejected or cancelled, never resumed."""

    list_display = (*RunListAdmin.list_display, "gate")

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return RunListAdmin.get_queryset(self, request).filter(AT_APPROVAL_GATE)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("resume_runs", None)
        return actions

    @admin.display(description="approval")
    def gate(self, run: WorkflowRun) -> str:
        return step_label(str((run.error or {}).get("step", "")))
