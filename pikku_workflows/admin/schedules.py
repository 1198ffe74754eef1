"""Schedules in the console: the list with the next fire times, pause, resume, trigger and
backfill (each behind ``change_workflowschedule``, confirmed, logged), a schedule's page
with its ticks and their runs, and a form for schedules made in the admin."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from .. import operations
from ..durations import parse_duration
from ..exceptions import WorkflowError, WorkflowScheduleError
from ..models import WorkflowSchedule, WorkflowScheduleTick
from ..status import ScheduleSource, TickStatus
from .actions import JSONField
from .mixins import HistoryGuardMixin
from .urls import console_url, object_urls

if TYPE_CHECKING:
    # Django's ModelAdmin and ModelForm take no type argument at run time.
    _ScheduleAdminBase = admin.ModelAdmin[WorkflowSchedule]
    _ScheduleFormBase = forms.ModelForm[WorkflowSchedule]
else:
    _ScheduleAdminBase = admin.ModelAdmin
    _ScheduleFormBase = forms.ModelForm

#: Fire times the list and a schedule's page show ahead.
NEXT_FIRE_TIMES = 5
#: Ticks a schedule's page lists at a time, newest first (no count: one more is read).
TICKS_PER_PAGE = 50
#: The fields a schedule made in the admin has (``validate_schedule`` takes them).
SCHEDULE_FIELDS = ("name", "workflow", "cron", "every", "tz", "input", "overlap", "catchup",
                   "start_at", "end_at", "paused")
#: The fields whose change moves the next tick.
TIMING_FIELDS = ("cron", "every", "tz", "start_at", "end_at")
CHANGE_PERMISSION = "pikku_workflows.change_workflowschedule"
BREAK = mark_safe("<br>")
#: verb -> (its past tense, what its confirmation asks)
VERBS = {
    "pause": ("paused", "No tick fires while it is paused."),
    "resume": ("resumed", "Ticks fire again from the next one due."),
    "trigger": ("triggered", "A tick at the current time starts a run, under the "
                             "schedule's overlap policy."),
    "backfill": ("backfilled", "Every tick between the two times is recorded and its run "
                               "started, in order, under the schedule's overlap policy."),
}


def local(at: datetime | None) -> str:
    """``at`` in the user's time zone (the active one), as the console writes times."""
    if at is None:
        return "-"
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S %Z")


def cadence(schedule: WorkflowSchedule) -> str:
    """``cron 0 3 * * *`` or ``every 60s``."""
    if schedule.cron:
        return f"cron {schedule.cron}"
    return f"every {format_duration(schedule.every or 0)}"


def format_duration(seconds: float) -> str:
    """``90`` -> ``1min 30s``; ``86400`` -> ``1d``."""
    parts, rest = [], float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if rest >= size:
            count = int(rest // size)
            parts.append(f"{count}{unit}")
            rest -= count * size
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return " ".join(parts)


class DurationTextField(forms.CharField):
    """A duration typed as text (``"1min"``, ``"90s"``, ``"1h"``) or seconds; in seconds."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return format_duration(value).replace(" ", "") if value else "0s"
        return value

    def to_python(self, value: Any) -> float | None:  # type: ignore[override]
        text = (value or "").strip() if isinstance(value, str) else value
        if text in ("", None):
            return None
        try:
            return parse_duration(text, what=str(self.label or "duration"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class ScheduleForm(_ScheduleFormBase):
    """A schedule made in the admin, checked by the engine's ``validate_schedule`` before
    anything is written (its errors on the fields they name)."""

    input = JSONField(required=False, help_text="The input of each run (JSON).")
    every = DurationTextField(required=False, label="every",
                              help_text="An interval such as 30s, 5min, 1h (or a cron).")
    catchup = DurationTextField(required=False, label="catch-up", initial="0s",
                                help_text="How late a missed tick may still start, e.g. "
                                          "10min (0s: never caught up).")

    class Meta:
        model = WorkflowSchedule
        fields = list(SCHEDULE_FIELDS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors or "workflow" not in self.fields:
            return cleaned  # a code schedule's form holds only ``paused``
        fields: dict[str, Any] = {name: cleaned.get(name) for name in SCHEDULE_FIELDS
                                  if name in self.fields}
        fields["cron"] = fields.get("cron") or None
        if fields.get("catchup") is None:
            fields["catchup"] = cleaned["catchup"] = 0.0
        if self.instance.pk is not None:
            fields["name"] = self.instance.name  # read-only on the form
        try:
            self.definition = operations.validate_schedule(**fields)
        except WorkflowScheduleError as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, str(exc))
        return cleaned


class BackfillForm(forms.Form):
    start = forms.DateTimeField(label="from", help_text="The first tick's earliest time "
                                                        "(in your time zone).")
    end = forms.DateTimeField(label="to", help_text="The last tick's latest time.")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("start"), cleaned.get("end")
        if start is not None and end is not None and end < start:
            self.add_error("end", "'to' is before 'from'.")
        return cleaned


class ConfirmForm(forms.Form):
    pass


class WorkflowScheduleAdmin(HistoryGuardMixin, _ScheduleAdminBase):
    """Code schedules are read-only but for ``paused``; admin ones are edited in a form."""

    form = ScheduleForm
    list_display = ("name", "workflow", "cadence", "tz", "next_fire_times", "last_tick",
                    "paused", "source")
    list_filter = ("paused", "source", "workflow")
    search_fields = ("name", "workflow")
    ordering = ("name",)
    actions = ["pause_schedules", "resume_schedules", "trigger_schedules"]
    change_form_template = "admin/pikku_workflows/workflowschedule/change_form.html"

    # --- permissions --------------------------------------------------------------------

    def _may_change(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(CHANGE_PERMISSION))

    def has_delete_permission(self, request: HttpRequest,
                              obj: WorkflowSchedule | None = None) -> bool:
        # A code schedule comes back at the next sync: pause it instead.
        if obj is not None and obj.source != ScheduleSource.ADMIN:
            return False
        return super().has_delete_permission(request, obj)

    def get_readonly_fields(self, request: HttpRequest,
                            obj: WorkflowSchedule | None = None) -> list[str]:
        if obj is not None and obj.source != ScheduleSource.ADMIN:
            return [name for name in SCHEDULE_FIELDS if name != "paused"]
        if obj is not None:
            return ["name"]  # the name keys its ticks' idempotency keys
        return []

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        if not self._may_change(request):
            for name in ("pause_schedules", "resume_schedules", "trigger_schedules"):
                actions.pop(name, None)
        return actions

    # --- the list -----------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowSchedule]:
        # Each row's last tick by subqueries: one query for the page, not one a row.
        last = WorkflowScheduleTick.objects.filter(schedule=OuterRef("pk")).order_by("-tick_at")
        schedules: QuerySet[WorkflowSchedule] = super().get_queryset(request)
        return schedules.annotate(
            last_tick_at=Subquery(last.values("tick_at")[:1]),
            last_tick_status=Subquery(last.values("status")[:1]))

    @admin.display(description="cron or interval")
    def cadence(self, schedule: WorkflowSchedule) -> str:
        return cadence(schedule)

    @admin.display(description="next fire times")
    def next_fire_times(self, schedule: WorkflowSchedule) -> str:
        times = operations.next_fire_times(schedule, count=NEXT_FIRE_TIMES)
        if not times:
            return "-"
        return format_html_join(BREAK, '<time datetime="{}">{}</time>',
                                ((at.isoformat(), local(at)) for at in times))

    @admin.display(description="last tick")
    def last_tick(self, schedule: WorkflowSchedule) -> str:
        at = getattr(schedule, "last_tick_at", None)
        status = getattr(schedule, "last_tick_status", None)
        if at is None:
            return "-"
        return format_html('{} <span class="pk-pill pk-tick-{}" data-tick-status="{}">{}'
                           '</span>', local(at), status, status, status)

    # --- a schedule's page --------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: WorkflowSchedule, form: Any,
                   change: bool) -> None:
        definition = getattr(form, "definition", None)
        if definition is None:
            # A code schedule: only ``paused`` changes, through the engine's operations
            # (the ticks of a pause are not owed; resuming starts from now).
            if "paused" in form.changed_data:
                operate = operations.pause_schedule if obj.paused else \
                    operations.resume_schedule
                operate(obj.name, actor=request.user)
            return
        # What the engine normalized (the input as its serializer validated it, UTC
        # times), and the next tick owed from now when the timing changed or it resumed.
        fields = operations.schedule_fields(definition)
        moved = not change or any(name in form.changed_data for name in TIMING_FIELDS) \
            or (not obj.paused and "paused" in form.changed_data)
        for name, value in fields.items():
            if name == "name" and change:
                continue
            if name != "next_fire_at" or moved:
                setattr(obj, name, value)
        if not change:
            obj.source = ScheduleSource.ADMIN
        if change and not moved:
            # Not the next tick read with the form: a scheduler may have fired it since,
            # and writing it back would owe that tick again.
            obj.save(update_fields=[field.name for field in obj._meta.concrete_fields
                                    if not field.primary_key and field.name != "next_fire_at"])
            return
        super().save_model(request, obj, form, change)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        schedule = self._schedule(request, object_id)
        return super().change_view(request, object_id, form_url, {
            **self._page_context(request, schedule), **(extra_context or {})})

    def _schedule(self, request: HttpRequest, object_id: str) -> WorkflowSchedule:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        schedule = WorkflowSchedule.objects.filter(pk=object_id).first() \
            if object_id.isascii() and object_id.isdigit() and len(object_id) < 19 else None
        if schedule is None:
            raise Http404(f"No schedule has the id {object_id!r}.")
        return schedule

    def _page_context(self, request: HttpRequest, schedule: WorkflowSchedule
                      ) -> dict[str, Any]:
        page_text = request.GET.get("ticks", "1")
        page = int(page_text) if page_text.isascii() and page_text.isdigit() \
            and 0 < len(page_text) < 7 else 1
        page = max(page, 1)
        start = (page - 1) * TICKS_PER_PAGE
        # Any: the template's extras become attributes of the rows.
        rows: list[Any] = list(WorkflowScheduleTick.objects.filter(schedule=schedule)
                    .select_related("run").order_by("-tick_at")
                    [start:start + TICKS_PER_PAGE + 1])
        for tick in rows:
            tick.local_at = local(tick.tick_at)
            tick.local_until = local(tick.missed_until) if tick.missed_until else ""
            tick.why = tick_detail(tick)

        def link(number: int) -> str:
            params = request.GET.copy()
            params["ticks"] = str(number)
            return "?" + params.urlencode()

        tools = []
        if self._may_change(request):
            for verb in VERBS:
                if (verb == "pause" and schedule.paused) or (
                        verb == "resume" and not schedule.paused):
                    continue
                tools.append({"verb": verb, "label": verb.capitalize(), "url": console_url(
                    self.admin_site.name, f"workflowschedule_{verb}", schedule.pk)})
        return {
            "schedule": schedule, "schedule_cadence": cadence(schedule),
            "fire_times": [local(at) for at in operations.next_fire_times(
                schedule, count=NEXT_FIRE_TIMES)],
            "ticks": rows[:TICKS_PER_PAGE], "ticks_page": page,
            "ticks_next": link(page + 1) if len(rows) > TICKS_PER_PAGE else None,
            "ticks_previous": link(page - 1) if page > 1 else None,
            "schedule_tools": tools,
            "code_schedule": schedule.source != ScheduleSource.ADMIN,
        }

    # --- actions ------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        return object_urls(self, {verb: self._object_view(verb) for verb in VERBS}) \
            + super().get_urls()

    def _object_view(self, verb: str) -> Callable[..., HttpResponse]:
        def view(request: HttpRequest, object_id: str) -> HttpResponse:
            return self.act_on_schedule(request, object_id, verb)
        return view

    def act_on_schedule(self, request: HttpRequest, object_id: str, verb: str) -> HttpResponse:
        """A confirmation page, then the action (POST); ``change_workflowschedule``."""
        if not self._may_change(request):
            raise PermissionDenied
        schedule = self._schedule(request, object_id)
        page = console_url(self.admin_site.name, "workflowschedule_change", schedule.pk)
        form_class = BackfillForm if verb == "backfill" else ConfirmForm
        form = form_class(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                message = self._perform(request, schedule, verb, form.cleaned_data)
            except WorkflowScheduleError as exc:
                if exc.field not in form.fields:
                    messages.error(request, f"{verb.capitalize()} refused: {exc}")
                    return HttpResponseRedirect(page)
                form.add_error(exc.field, str(exc))  # nothing was written: the form again
            except WorkflowError as exc:
                messages.error(request, f"{verb.capitalize()} refused: {exc}")
                return HttpResponseRedirect(page)
            else:
                self.log_change(request, schedule, message)
                messages.success(request, message)
                return HttpResponseRedirect(page)
        context = {
            **self.admin_site.each_context(request), "opts": self.opts,
            "schedule": schedule, "verb": verb, "form": form,
            "explanation": VERBS[verb][1], "title": f"{verb.capitalize()} {schedule.name}",
            "schedule_url": page, "has_view_permission": True,
        }
        return TemplateResponse(
            request, "admin/pikku_workflows/workflowschedule/confirm.html", context)

    def _perform(self, request: HttpRequest, schedule: WorkflowSchedule, verb: str,
                 data: dict[str, Any]) -> str:
        name = schedule.name
        if verb == "pause":
            operations.pause_schedule(name, actor=request.user)
            return f"Schedule {name} paused."
        if verb == "resume":
            operations.resume_schedule(name, actor=request.user)
            return f"Schedule {name} resumed."
        if verb == "trigger":
            tick = operations.trigger_schedule(name, actor=request.user)
            return (f"Schedule {name} triggered: the tick at {local(tick.tick_at)} is "
                    f"{tick.status}" + (f" (run {tick.run_id})." if tick.run_id else "."))
        ticks = operations.backfill_schedule(name, data["start"], data["end"],
                                             actor=request.user)
        counts: dict[str, int] = {}
        for tick in ticks:
            counts[tick.status] = counts.get(tick.status, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        return (f"Schedule {name} backfilled from {local(data['start'])} to "
                f"{local(data['end'])}: {len(ticks)} tick{'s' if len(ticks) != 1 else ''}"
                + (f" ({summary})." if summary else "."))

    def _bulk(self, request: HttpRequest, queryset: QuerySet[WorkflowSchedule],
              verb: str) -> None:
        if not self._may_change(request):
            raise PermissionDenied
        done, refused = [], []
        for schedule in queryset.order_by("name"):
            try:
                message = self._perform(request, schedule, verb, {})
            except WorkflowError as exc:
                refused.append(f"{schedule.name}: {exc}")
                continue
            self.log_change(request, schedule, message)
            done.append(schedule.name)
        if done:
            self.message_user(request, f"{VERBS[verb][0].capitalize()} {len(done)} "
                                       f"schedule{'s' if len(done) != 1 else ''}: "
                                       + ", ".join(done) + ".", messages.SUCCESS)
        for text in refused:
            self.message_user(request, f"{verb.capitalize()} refused: {text}", messages.ERROR)

    @admin.action(description="Pause the selected schedules")
    def pause_schedules(self, request: HttpRequest,
                        queryset: QuerySet[WorkflowSchedule]) -> None:
        self._bulk(request, queryset, "pause")

    @admin.action(description="Resume the selected schedules")
    def resume_schedules(self, request: HttpRequest,
                         queryset: QuerySet[WorkflowSchedule]) -> None:
        self._bulk(request, queryset, "resume")

    @admin.action(description="Trigger the selected schedules now")
    def trigger_schedules(self, request: HttpRequest,
                          queryset: QuerySet[WorkflowSchedule]) -> None:
        self._bulk(request, queryset, "trigger")


def tick_detail(tick: WorkflowScheduleTick) -> str:
    """Why a tick has no run, in words (never a silent tick): the engine's own words
    when it wrote some."""
    if tick.detail:
        return tick.detail
    if tick.status == TickStatus.MISSED:
        if tick.missed_count > 1:
            return (f"{tick.missed_count} ticks missed until {local(tick.missed_until)}: "
                    "no scheduler ran them within the catch-up window")
        return "no scheduler ran it within the catch-up window"
    if tick.status == TickStatus.SKIPPED:
        return "the previous run was still live (overlap: skip)"
    if tick.status == TickStatus.BUFFERED:
        return "waits for the previous run to finish (overlap: buffer_one)"
    return ""
