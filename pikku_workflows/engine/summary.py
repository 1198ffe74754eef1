"""The run detail: one serializer for ``get_run_status`` and the REST API's run detail."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Prefetch
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..status import RunStatus, StepStatus
from ..types import JSONObject, UserJSON


def step_duration_ms(step: WorkflowStep, attempts: list[StepAttempt]) -> int | None:
    """Time of the latest attempt, from running (or creation) to its end."""
    if not attempts:
        return None
    last = attempts[-1]
    end = last.succeeded_at or last.failed_at
    if end is None:
        return None
    return round((end - (last.running_at or last.created_at)).total_seconds() * 1000)


#: The prefix of the keys the engine gives gates (``__workflow_approval:<reason>``...).
ENGINE_KEY_PREFIX = "__workflow_"


def public_step_name(key: str) -> str:
    """A step key as API users see it: a gate's ``__workflow_approval:Sign-off`` is
    ``approval:Sign-off`` (still unique within the run), other keys are unchanged."""
    return key[len(ENGINE_KEY_PREFIX):] if key.startswith(ENGINE_KEY_PREFIX) else key


def public_error(error: JSONObject | None) -> JSONObject | None:
    """The error as API users see it: message, code and step; never a traceback."""
    if not error:
        return None
    return {k: error[k] for k in ("message", "code", "step") if k in error}


def iso(moment: datetime | None) -> str | None:
    """A timestamp in ISO 8601, in the project's ``TIME_ZONE`` (as DRF renders them)."""
    return timezone.localtime(moment).isoformat() if moment else None


class IsoDateTimeField(serializers.DateTimeField):
    """A timestamp as ``datetime.isoformat()`` (the same text inline, in JSON and in SSE)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: datetime | None) -> Any:  # the stubs say str
        return iso(value)


@extend_schema_field({"type": "object", "nullable": True, "properties": {
    "message": {"type": "string"}, "code": {"type": "string"}, "step": {"type": "string"}}})
class PublicErrorField(serializers.JSONField):
    """``{message, code, step}`` of an error dict, or null (no stack traces)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: Any) -> Any:  # the stubs' types are the wrong ones
        return public_error(value)


class NamedChoiceField(serializers.ChoiceField):
    """A ``ChoiceField`` whose choice set is one named enum in the OpenAPI schema
    (``pikku_workflows.api.schema``)."""

    def __init__(self, enum_name: str, **kwargs: Any) -> None:
        self.enum_name = enum_name
        super().__init__(**kwargs)


def status_field(choices: type[models.TextChoices], **kwargs: Any) -> serializers.ChoiceField:
    """A read-only status with its choices (the schema's enum ``Pikku<ChoicesName>``)."""
    return NamedChoiceField(f"Pikku{choices.__name__}", choices=choices.choices,
                            read_only=True, **kwargs)


class StepSummarySerializer(serializers.Serializer[WorkflowStep]):
    """A step as the run detail lists it (``attempts`` is a number)."""

    name = serializers.CharField(source="step_name", read_only=True)
    status = status_field(StepStatus)
    attempts = serializers.IntegerField(source="attempt_count", read_only=True)
    rpc_name = serializers.CharField(read_only=True, allow_null=True)
    duration_ms = serializers.SerializerMethodField()
    branch_taken = serializers.CharField(read_only=True, allow_null=True)
    child_run = serializers.UUIDField(source="child_run_id", read_only=True, allow_null=True)

    def get_duration_ms(self, step: WorkflowStep) -> int | None:
        return step_duration_ms(step, list(step.attempts.all()))


class RunDetailSerializer(serializers.Serializer[WorkflowRun]):
    """The run detail; ``output`` is null unless the run completed."""

    id = serializers.UUIDField(read_only=True)
    workflow = serializers.CharField(read_only=True)
    status = status_field(RunStatus)
    input = serializers.JSONField(read_only=True)
    output = serializers.SerializerMethodField()
    error = PublicErrorField()
    owner = serializers.IntegerField(source="owner_id", read_only=True, allow_null=True)
    parent_run = serializers.UUIDField(source="parent_run_id", read_only=True, allow_null=True)
    graph_hash = serializers.CharField(read_only=True)
    inline = serializers.BooleanField(read_only=True)
    created_at = IsoDateTimeField()
    updated_at = IsoDateTimeField()
    finished_at = IsoDateTimeField()
    steps = serializers.SerializerMethodField()

    def get_output(self, run: WorkflowRun) -> UserJSON:
        return run.output if run.status == RunStatus.COMPLETED else None

    @extend_schema_field(StepSummarySerializer(many=True))
    def get_steps(self, run: WorkflowRun) -> object:
        steps = self.context.get("steps")
        if steps is not None:
            return StepSummarySerializer(steps, many=True).data
        return step_summaries(run.pk)


def step_summaries(run_id: uuid.UUID) -> list[dict[str, object]]:
    """The run detail's step list from plain rows (two queries, no model instances): the
    same fields as ``StepSummarySerializer``, ten times faster for a thousand steps."""
    last_attempts = {  # ordered by attempt: the last one wins
        attempt["step_id"]: attempt for attempt in StepAttempt.objects.filter(
            step__run_id=run_id).order_by("step_id", "attempt").values(
            "step_id", "created_at", "running_at", "succeeded_at", "failed_at")}
    summaries = []
    for step in WorkflowStep.objects.filter(run_id=run_id).order_by("id").values(
            "id", "step_name", "status", "attempt_count", "rpc_name", "branch_taken",
            "child_run_id"):
        last = last_attempts.get(step["id"])
        duration = None
        end = (last["succeeded_at"] or last["failed_at"]) if last is not None else None
        if last is not None and end:
            duration = round((end - (last["running_at"] or last["created_at"]))
                             .total_seconds() * 1000)
        summaries.append({
            "name": step["step_name"], "status": step["status"],
            "attempts": step["attempt_count"], "rpc_name": step["rpc_name"],
            "duration_ms": duration, "branch_taken": step["branch_taken"],
            "child_run": str(step["child_run_id"]) if step["child_run_id"] else None,
        })
    return summaries


def steps_with_attempts(run: WorkflowRun) -> list[WorkflowStep]:
    """The run's steps in order, their attempts prefetched: two queries, any size."""
    return list(WorkflowStep.objects.filter(run=run).prefetch_related(
        Prefetch("attempts", queryset=StepAttempt.objects.order_by("attempt"))))


def run_detail(run: WorkflowRun, steps: list[WorkflowStep] | None = None
               ) -> dict[str, UserJSON]:
    """The run detail dict, JSON-ready (the same as ``GET runs/{id}/``)."""
    data = RunDetailSerializer(run, context={"steps": steps}).data
    # Plain dicts, so that callers can compare and json.dumps it as is.
    return {**data, "steps": [dict(step) for step in data["steps"]]}
