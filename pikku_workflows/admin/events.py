"""The events list (who sent each event, which runs consumed it) and "Send an event"."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join

from ..exceptions import WorkflowError
from ..models import WorkflowEvent, WorkflowWait
from ..paging import BoundedCountPaginator
from ..step_keys import step_label
from .mixins import ReadOnlyAdminMixin, StaffViewMixin
from .runs import pretty_json
from .urls import console_url
from .waits import SendEventForm, may_send_event, refused, send_event, sent_text

if TYPE_CHECKING:
    _EventAdminBase = admin.ModelAdmin[WorkflowEvent]
else:
    _EventAdminBase = admin.ModelAdmin

#: The most consuming runs a row of the list links to (its page lists them all).
RUNS_LINKED = 3
#: The most consuming runs an event's page lists.
RUNS_SHOWN = 200


class EventChangeList(ChangeList):
    """Adds the first consuming runs of each shown event with one query for the page."""

    def _get_deterministic_ordering(self, ordering: list[str]) -> list[str]:
        return ordering  # "-id" is already unique

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Any: the runs become attributes of the rows, for the columns.
        events: list[Any] = list(self.result_list)
        linked: dict[int, list[Any]] = defaultdict(list)
        for wait in WorkflowWait.objects.filter(event_id__in=[e.pk for e in events]).order_by(
                "event_id", "id").only("event_id", "run_id", "step"):
            if wait.event_id is not None and len(linked[wait.event_id]) < RUNS_LINKED:
                linked[wait.event_id].append(wait)
        for event in events:
            event.linked_waits = linked.get(event.pk, [])
        self.result_list = events
        self.count_is_exact = getattr(self.paginator, "count_is_exact", True)


class WorkflowEventAdmin(StaffViewMixin, ReadOnlyAdminMixin, _EventAdminBase):
    """Events, newest first: read-only (the engine writes them); sent from the "Send an
    event" form, the REST API or code."""

    view_permission = "pikku_workflows.view_workflowevent"
    list_display = ("id", "event", "key_shown", "created_at", "sent_by", "consumed_by")
    list_display_links = ("id", "event")
    list_filter = ("created_at",)
    search_fields = ("event",)
    search_help_text = ("An event's exact name, or its name and key separated by a space: "
                        "payment.succeeded order-8.")
    show_full_result_count = False
    paginator = BoundedCountPaginator
    list_per_page = 100
    list_select_related = ("sent_by",)
    ordering = ("-id",)
    change_list_template = "admin/pikku_workflows/workflowevent/change_list.html"

    def get_changelist(self, request: HttpRequest, **kwargs: object) -> type[ChangeList]:
        return EventChangeList

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).annotate(consumers=Count("consumptions"))

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str
                           ) -> tuple[Any, bool]:
        # Exact matches on the (event, key, id) index, where Django's icontains (or an OR
        # of the two columns) would read every event.
        parts = search_term.split(None, 1)
        if not parts:
            return queryset, False
        if len(parts) == 1:
            return queryset.filter(event=parts[0]), False
        return queryset.filter(event=parts[0], key=parts[1].strip()), False

    @admin.display(description="key", ordering="key")
    def key_shown(self, event: WorkflowEvent) -> str:
        return "-" if event.key is None else event.key

    @admin.display(description="consumed by")
    def consumed_by(self, event: Any) -> str:
        count = getattr(event, "consumers", 0)
        if not count:
            return "no run"
        links = format_html_join(", ", '<a href="{}" data-consumer="{}">{}</a>', (
            (console_url(self.admin_site.name, "workflowrun_change", wait.run_id),
             wait.run_id, str(wait.run_id)[:8]) for wait in getattr(event, "linked_waits", [])))
        more = count - len(getattr(event, "linked_waits", []))
        return format_html('{} run{}: {}{}', count, "" if count == 1 else "s", links,
                           f" and {more} more" if more > 0 else "")

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        context = {"send_url": console_url(self.admin_site.name, "workflowevent_send")
                   if may_send_event(request) else "", **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def get_urls(self) -> list[URLPattern]:
        return [path("send/", self.admin_site.admin_view(self.send_view),
                     name="pikku_workflows_workflowevent_send"), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """An event's page: its data and the runs that consumed it, with their step."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        # An id no column can hold is no event's (the driver would overflow).
        event = WorkflowEvent.objects.select_related("sent_by").filter(
            pk=int(object_id)).first() if object_id.isascii() and object_id.isdigit() \
            and int(object_id) < 2**63 else None
        if event is None:
            raise Http404(f"No event has the id {object_id!r}.")
        # Any: the label becomes an attribute of the rows, for the template.
        waits: list[Any] = list(WorkflowWait.objects.filter(event=event).select_related(
            "run").order_by("id")[:RUNS_SHOWN])
        for wait in waits:
            wait.step_label = step_label(wait.step)
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "event": event,
            "title": f"Event {event.pk}: {event.event}", "data_json": pretty_json(event.data),
            "waits": waits, "consumers": WorkflowWait.objects.filter(event=event).count(),
            "has_view_permission": True, **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/pikku_workflows/workflowevent/event_page.html",
                                context)

    def send_view(self, request: HttpRequest) -> HttpResponse:
        """"Send an event" (``add_workflowevent``): ``send_event``, in the admin log."""
        if not (self.has_view_permission(request) and may_send_event(request)):
            raise PermissionDenied
        form = SendEventForm(request.POST if request.method == "POST" else None)
        changelist = console_url(self.admin_site.name, "workflowevent_changelist")
        if request.method == "POST" and form.is_valid():
            try:
                result = send_event(request, form.cleaned_data)
            except WorkflowError as exc:
                refused(request, exc)
            else:
                if result.created:
                    LogEntry.objects.log_actions(
                        user_id=cast(int, request.user.pk),
                        queryset=WorkflowEvent.objects.filter(pk=result.id),
                        action_flag=ADDITION, single_object=True,
                        change_message=f"sent via the console; it woke {result.woken} run(s)")
                messages.success(request, sent_text("event", result))
                return HttpResponseRedirect(
                    console_url(self.admin_site.name, "workflowevent_change", result.id))
        context = {**self.admin_site.each_context(request), "opts": self.opts, "form": form,
                   "title": "Send an event", "changelist_url": changelist}
        return TemplateResponse(request, "admin/pikku_workflows/workflowevent/send.html",
                                context)


__all__ = ["WorkflowEventAdmin"]
