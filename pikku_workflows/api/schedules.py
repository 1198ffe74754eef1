"""The REST API's schedules: list, detail with recent ticks, trigger, pause and resume.

Nobody owns a schedule: ``view_workflowschedule`` shows them all (without it the list is
empty and a schedule answers 404, as a run one may not see), and each action needs
``change_workflowschedule`` (403 naming it).
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import OuterRef, QuerySet, Subquery
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from .. import operations
from ..engine.summary import iso
from ..exceptions import WorkflowScheduleError
from ..models import WorkflowSchedule, WorkflowScheduleTick
from ..status import ScheduleOverlap, ScheduleSource, TickStatus, TickTrigger
from ..types import JSONObject
from .pagination import RunPartPagination
from .params import StrictQueryParamsMixin
from .schema import PikkuAutoSchema
from .serializers import IsoDateTimeField, NamedChoiceField, StrictBodySerializer
from .views import PikkuAPIMixin, _body, _errors

#: The recent ticks a schedule's detail lists, newest first.
RECENT_TICKS = 20
#: How many fire times a schedule lists ahead.
NEXT_FIRE_TIMES = 5
VIEW_PERMISSION = "pikku_workflows.view_workflowschedule"
CHANGE_PERMISSION = "pikku_workflows.change_workflowschedule"

_SCHEDULE_NAME = OpenApiParameter("name", str, OpenApiParameter.PATH,
                                  description="The schedule's unique name.")
#: An empty object: drf-spectacular leaves out a serializer without fields.
_EMPTY_BODY = {"application/json": {"type": "object", "properties": {},
                                    "additionalProperties": False}}
_READ = (400, 401, 403)
_WRITE = (400, 401, 403, 411, 413, 415)


def visible_schedules(user: Any) -> QuerySet[WorkflowSchedule]:
    """The schedules ``user`` may see: all of them with ``view_workflowschedule`` (or
    ``change_workflowschedule``, which the admin counts as viewing), else none."""
    schedules = WorkflowSchedule.objects.order_by("name")
    if user.is_authenticated and (user.has_perm(VIEW_PERMISSION)
                                  or user.has_perm(CHANGE_PERMISSION)):
        return schedules
    return schedules.none()


class ScheduleActionPermission(BasePermission):
    """``trigger/``, ``pause/`` and ``resume/`` need ``change_workflowschedule``."""

    message = ("To trigger, pause or resume a schedule you need the permission "
               f"'{CHANGE_PERMISSION}'.")

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        if getattr(view, "action", None) in ("list", "retrieve"):
            return True
        return bool(request.user.is_authenticated and request.user.has_perm(CHANGE_PERMISSION))


# --- Shapes ----------------------------------------------------------------------------


class ScheduleTickSerializer(serializers.Serializer[JSONObject]):
    """A tick: what became of one instant of a schedule."""

    tick_at = IsoDateTimeField(help_text="The tick's instant (UTC).")
    status = NamedChoiceField("PikkuTickStatus", choices=TickStatus.choices, read_only=True,
                              help_text="`started` (its run), `skipped` (the previous run "
                                        "was live under `overlap=skip`), `buffered` (its "
                                        "run waits for the previous one), `missed` (too "
                                        "late for `catchup`).")
    run = serializers.UUIDField(read_only=True, allow_null=True,
                                help_text="The run the tick created, if any.")
    missed_until = IsoDateTimeField(
        help_text="A gap of missed ticks kept as one row: its last tick; else null.")
    missed_count = serializers.IntegerField(
        read_only=True, help_text="How many ticks a missed gap row stands for; else 0.")
    trigger = NamedChoiceField("PikkuTickTrigger", choices=TickTrigger.choices,
                               read_only=True,
                               help_text="What made the tick: its `cron` (the cadence), a "
                                         "`manual` trigger, a `backfill`, a `catchup`.")
    detail = serializers.CharField(read_only=True, allow_blank=True,
                                   help_text="Why it was skipped, buffered or missed.")


class ScheduleSerializer(serializers.Serializer[JSONObject]):
    """A schedule with its next fire times."""

    name = serializers.CharField(read_only=True)
    workflow = serializers.CharField(read_only=True)
    cron = serializers.CharField(read_only=True, allow_null=True,
                                 help_text="Five cron fields, in `tz`; or null.")
    every = serializers.FloatField(read_only=True, allow_null=True,
                                   help_text="The interval in seconds; or null.")
    tz = serializers.CharField(read_only=True, help_text="An IANA time zone.")
    input = serializers.JSONField(read_only=True, allow_null=True)
    overlap = NamedChoiceField("PikkuOverlapPolicy", choices=ScheduleOverlap.choices,
                               read_only=True)
    catchup = serializers.FloatField(read_only=True,
                                     help_text="How late (seconds) a tick may still start.")
    start_at = IsoDateTimeField()
    end_at = IsoDateTimeField()
    paused = serializers.BooleanField(read_only=True)
    source = NamedChoiceField(  # type: ignore[assignment]
        "PikkuScheduleSource", choices=ScheduleSource.choices, read_only=True)
    next_fire_at = IsoDateTimeField()
    next_fire_times = serializers.ListField(
        child=serializers.CharField(), read_only=True,
        help_text=f"The next {NEXT_FIRE_TIMES} fire times (ISO 8601, in `tz`); none when "
                  "paused or ended.")
    last_tick = ScheduleTickSerializer(read_only=True, allow_null=True)


class ScheduleDetailSerializer(ScheduleSerializer):
    recent_ticks = ScheduleTickSerializer(many=True, read_only=True,
                                          help_text=f"The last {RECENT_TICKS} ticks, "
                                                    "newest first.")


class EmptyBodySerializer(StrictBodySerializer):
    """``trigger/``, ``pause/``, ``resume/``: an empty object."""


def tick_record(tick: WorkflowScheduleTick | None) -> dict[str, Any] | None:
    """A tick as the API shows it."""
    if tick is None:
        return None
    return {"tick_at": iso(tick.tick_at), "status": tick.status,
            "run": str(tick.run_id) if tick.run_id else None,
            "missed_until": iso(tick.missed_until), "missed_count": tick.missed_count,
            "trigger": tick.trigger, "detail": tick.detail}


def schedule_record(schedule: WorkflowSchedule, ticks: list[WorkflowScheduleTick], *,
                    detail: bool = False) -> dict[str, Any]:
    """A schedule as the API shows it; ``ticks``: its latest ones, newest first (the
    detail lists them as ``recent_ticks``)."""
    zone = ZoneInfo(schedule.tz)
    fire_times = operations.next_fire_times(schedule, count=NEXT_FIRE_TIMES)
    record = {
        "name": schedule.name, "workflow": schedule.workflow,
        "cron": schedule.cron or None, "every": schedule.every,
        "tz": schedule.tz, "input": schedule.input, "overlap": schedule.overlap,
        "catchup": schedule.catchup,
        "start_at": iso(schedule.start_at), "end_at": iso(schedule.end_at),
        "paused": schedule.paused, "source": schedule.source,
        "next_fire_at": iso(schedule.next_fire_at),
        "next_fire_times": [at.astimezone(zone).isoformat() for at in fire_times],
        "last_tick": tick_record(ticks[0] if ticks else None),
    }
    if detail:
        record["recent_ticks"] = [tick_record(tick) for tick in ticks]
    return record


def latest_ticks(schedule: WorkflowSchedule, count: int) -> list[WorkflowScheduleTick]:
    """The schedule's ``count`` latest ticks, newest first."""
    return list(schedule.ticks.order_by("-tick_at")[:count])


def with_last_ticks(schedules: list[WorkflowSchedule]) -> list[dict[str, Any]]:
    """The records of a page of schedules, their last ticks read in one query."""
    last_ids = [getattr(s, "last_tick_id", None) for s in schedules]
    ticks = WorkflowScheduleTick.objects.in_bulk([pk for pk in last_ids if pk is not None])
    return [schedule_record(s, [ticks[pk]] if pk in ticks else [])
            for s, pk in zip(schedules, last_ids, strict=True)]


# --- Views -----------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        operation_id="list_schedules", summary="Schedules, by name (paginated)",
        description="Every schedule with its next fire times and last tick, for holders "
                    "of `view_workflowschedule`; an empty list for anyone else.",
        responses={200: ScheduleSerializer(many=True), **_errors(*_READ, 404)}),
    retrieve=extend_schema(
        operation_id="get_schedule", summary="A schedule with its recent ticks",
        description=f"The schedule as listed, plus its last {RECENT_TICKS} ticks, newest "
                    "first (a missed gap is one tick with `missed_until` and "
                    "`missed_count`).",
        parameters=[_SCHEDULE_NAME],
        responses={200: ScheduleDetailSerializer, **_errors(*_READ, 404)}),
)
class ScheduleViewSet(StrictQueryParamsMixin, PikkuAPIMixin, mixins.ListModelMixin,
                      viewsets.GenericViewSet[WorkflowSchedule]):
    """Schedules: read with ``view_workflowschedule``, steered with
    ``change_workflowschedule``."""

    schema = PikkuAutoSchema()
    serializer_class = ScheduleSerializer  # type: ignore[assignment]  # describes dicts
    pagination_class = RunPartPagination
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    query_parameters = {"list": RunPartPagination.query_parameters}

    def get_queryset(self) -> QuerySet[WorkflowSchedule]:
        schedules = visible_schedules(self.request.user)
        if self.action == "list":
            # Each row's last tick by a subquery: one query for a page, not one a row.
            schedules = schedules.annotate(last_tick_id=Subquery(
                WorkflowScheduleTick.objects.filter(schedule=OuterRef("pk"))
                .order_by("-tick_at").values("pk")[:1]))
        return schedules

    def get_permissions(self) -> list[Any]:
        return [*super().get_permissions(), ScheduleActionPermission()]

    def get_object(self) -> WorkflowSchedule:
        name = self.kwargs["name"]
        schedule = self.get_queryset().filter(name=name).first()
        if schedule is None:
            # The engine's own error (404): the same answer as a schedule deleted meanwhile.
            raise WorkflowScheduleError(f"no schedule is named {name[:200]!r}",
                                        code="SCHEDULE_NOT_FOUND")
        self.check_object_permissions(self.request, schedule)
        return schedule

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(with_last_ticks(list(page or ())))

    def retrieve(self, request: Request, name: str) -> Response:
        schedule = self.get_object()
        return Response(schedule_record(schedule, latest_ticks(schedule, RECENT_TICKS),
                                        detail=True))

    @extend_schema(
        operation_id="trigger_schedule", summary="Fire a schedule now (under its overlap)",
        description="Records a tick at the current time and starts its run as the "
                    "schedule's `overlap` policy says: the answer's `status` is `started`, "
                    "`skipped` (a run of the schedule is live under `skip`) or `buffered`. "
                    "A paused schedule fires too. Needs `change_workflowschedule`.",
        request=_EMPTY_BODY, parameters=[_SCHEDULE_NAME],
        responses={200: ScheduleTickSerializer, **_errors(*_WRITE, 404)})
    @action(detail=True, methods=["post"])
    def trigger(self, request: Request, name: str) -> Response:
        schedule = self.get_object()
        _body(EmptyBodySerializer, request)
        tick = operations.trigger_schedule(schedule.name, actor=request.user)
        return Response(tick_record(tick))

    @extend_schema(
        operation_id="pause_schedule", summary="Pause a schedule",
        description="No tick fires while it is paused (those passed meanwhile are not "
                    "caught up); answers the schedule. Needs `change_workflowschedule`.",
        request=_EMPTY_BODY, parameters=[_SCHEDULE_NAME],
        responses={200: ScheduleSerializer, **_errors(*_WRITE, 404)})
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        schedule = self.get_object()
        _body(EmptyBodySerializer, request)
        changed = operations.pause_schedule(schedule.name, actor=request.user)
        return Response(schedule_record(changed, latest_ticks(changed, 1)))

    @extend_schema(
        operation_id="resume_schedule", summary="Resume a paused schedule",
        description="Ticks fire again from the next one due; answers the schedule. Needs "
                    "`change_workflowschedule`.",
        request=_EMPTY_BODY, parameters=[_SCHEDULE_NAME],
        responses={200: ScheduleSerializer, **_errors(*_WRITE, 404)})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        schedule = self.get_object()
        _body(EmptyBodySerializer, request)
        changed = operations.resume_schedule(schedule.name, actor=request.user)
        return Response(schedule_record(changed, latest_ticks(changed, 1)))


__all__ = ["ScheduleViewSet", "schedule_record", "tick_record", "visible_schedules",
           "with_last_ticks"]
