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

from ..models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import registry
from ..status import RunStatus, StepKind, StepStatus, SuspensionCode, WorkflowSource
from ..step_keys import (
    COMPENSATION_SUFFIX,
    GATE_KINDS,
    PATCH_PREFIX,
    approval_wait,
    public_step_name,
    step_label,
)
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


def step_kind(key: str, *, rpc_name: str | None, child_run: object, data: object,
              graph: bool = False) -> StepKind:
    """What the step is, from its row alone: the one rule of every surface.

    Gates by their key (``__workflow_approval:``, ``__workflow_suspend:``), patch markers
    by theirs (``__workflow_patch:``, written by ``wf.patched``), compensations
    by theirs (``<key>:onError``), child runs by ``child_run`` (or an ``rpc_name`` that is
    a registered workflow), sleeps and inline closures by having no ``rpc_name`` (a sleep
    records ``{"duration": seconds}`` as its data, a closure none); the rest, graph nodes
    included, are ``step``. (``event`` and ``message`` are the kinds of the waits of
    DESIGN section 8.2, not recorded yet.)

    Args:
        key: The physical step key.
        rpc_name: The step's function (or child workflow), None for closures and sleeps.
        child_run: The child run's id, or None.
        data: The step's data; only its ``duration`` key is read (a caller may pass
            ``{"duration": ...}`` alone).
        graph: Whether the run is a graph run.

    Returns:
        The step's ``kind``.
    """
    if not graph:
        for prefix, kind in GATE_KINDS.items():
            if key.startswith(prefix):
                return kind
        if key.endswith(COMPENSATION_SUFFIX):
            return StepKind.COMPENSATION
        if key.startswith(PATCH_PREFIX):
            return StepKind.PATCH
    if child_run is not None or (rpc_name and registry.find_workflow(rpc_name) is not None):
        return StepKind.CHILD
    if graph or rpc_name:
        return StepKind.STEP
    if isinstance(data, dict) and data.get("duration") is not None:
        return StepKind.SLEEP
    return StepKind.CLOSURE


def step_names(key: str, *, rpc_name: str | None, child_run: object, data: object,
               graph: bool = False) -> dict[str, str]:
    """``{name, label, kind}`` of a step row (:func:`public_step_name`,
    :func:`step_label`, :func:`step_kind`)."""
    return {"name": public_step_name(key), "label": step_label(key, graph=graph),
            "kind": step_kind(key, rpc_name=rpc_name, child_run=child_run, data=data,
                              graph=graph).value}


def is_graph_run(workflow: str, graph_hash: str = "") -> bool:
    """Whether runs of ``workflow`` are graph runs: from the registry, or for a workflow
    no longer registered from its recorded version (one query).

    Args:
        workflow: The run's workflow name.
        graph_hash: The run's ``graph_hash``.

    Returns:
        True for a graph workflow's run.
    """
    definition = registry.find_workflow(workflow)
    if definition is not None:
        return bool(definition.source == WorkflowSource.GRAPH)
    source = WorkflowVersion.objects.filter(workflow=workflow, graph_hash=graph_hash) \
        .values_list("source", flat=True).first()
    return source == WorkflowSource.GRAPH


def public_error(error: JSONObject | None) -> JSONObject | None:
    """The error as API users see it: message, code and step; never a traceback."""
    if not error:
        return None
    public: JSONObject = {k: error[k] for k in ("message", "code", "step") if k in error}
    if approval_wait(error) is not None:
        # Older releases said WORKFLOW_SUSPENDED at approval gates too (step_keys).
        public["code"] = SuspensionCode.WAITING_FOR_APPROVAL.value
    step = public.get("step")
    if isinstance(step, str):
        public["step"] = public_step_name(step)
    return public


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
    "message": {"type": "string"},
    "code": {"type": "string", "description": (
        "Why the run failed, was cancelled or waits. A suspended run's code says what it "
        "waits for: " + ", ".join(f"`{code}`" for code in SuspensionCode.values) + "."),
        "example": SuspensionCode.WAITING_FOR_APPROVAL.value},
    "step": {"type": "string"}}})
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


class StepNameField(serializers.CharField):
    """A step key as its public ``name`` (:func:`public_step_name`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "The step's unique name in the run (`Charge#1`, "
                                       "`approval:<reason>`): what `fork` takes.")
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value: Any) -> str:
        return public_step_name(str(value))


class StepLabelField(serializers.CharField):
    """A step key as its ``label`` (:func:`step_label`); the serializer's context says
    whether the run is a graph run (``graph``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "What the code calls the step: `Charge` for "
                                       "`Charge#1`, the reason of a gate, the node of a "
                                       "graph instance.")
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value: Any) -> str:
        return step_label(str(value), graph=bool(self.context.get("graph")))


class StepKindField(NamedChoiceField):
    """A step's ``kind`` (:func:`step_kind`), read from the step row its ``source`` names
    (the schema's enum ``PikkuStepKind``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "What the step is: a function `step`, an inline "
                                       "`closure`, a `child` run, an `approval` or "
                                       "`suspend` gate, a `sleep`, an `event` or `message` "
                                       "wait, a `compensation` (on_error).")
        super().__init__(f"Pikku{StepKind.__name__}", choices=StepKind.choices,
                         read_only=True, **kwargs)

    def to_representation(self, value: Any) -> str:
        step: WorkflowStep = value
        return step_kind(step.step_name, rpc_name=step.rpc_name,
                         child_run=step.child_run_id, data=step.data,
                         graph=bool(self.context.get("graph"))).value


class StepSummarySerializer(serializers.Serializer[WorkflowStep]):
    """A step as the run detail lists it (``attempts`` is a number)."""

    name = StepNameField(source="step_name")
    label = StepLabelField(source="step_name")  # type: ignore[assignment]
    kind = StepKindField(source="*")
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
        graph = is_graph_run(run.workflow, run.graph_hash)
        steps = self.context.get("steps")
        if steps is not None:
            return StepSummarySerializer(steps, many=True, context={"graph": graph}).data
        return step_summaries(run.pk, graph=graph)


class StepSerializer(serializers.ModelSerializer[WorkflowStep]):
    """A step with its data, result and error (the REST API's ``runs/{id}/steps/``, a
    run's downloaded history)."""

    name = StepNameField(source="step_name")
    label = StepLabelField(source="step_name")  # type: ignore[assignment]
    kind = StepKindField(source="*")
    status = status_field(StepStatus)
    attempts = serializers.IntegerField(source="attempt_count", read_only=True)
    error = PublicErrorField()
    child_run = serializers.UUIDField(source="child_run_id", read_only=True, allow_null=True)
    from_step_name = StepNameField(
        allow_null=True, help_text="The name of the step recorded before this one.")
    created_at = IsoDateTimeField()
    updated_at = IsoDateTimeField()

    class Meta:
        model = WorkflowStep
        fields = ["name", "label", "kind", "status", "rpc_name", "data", "result", "error",
                  "attempts", "branch_taken", "child_run", "from_step_name", "created_at",
                  "updated_at"]
        read_only_fields = fields


class AttemptSerializer(serializers.ModelSerializer[StepAttempt]):
    """One entry per attempt (the REST API's ``runs/{id}/history/``, a run's downloaded
    history)."""

    step = StepNameField(source="step.step_name")
    label = StepLabelField(source="step.step_name")  # type: ignore[assignment]
    kind = StepKindField(source="step")
    status = status_field(StepStatus)
    error = PublicErrorField()
    created_at = IsoDateTimeField()
    running_at = IsoDateTimeField()
    succeeded_at = IsoDateTimeField()
    failed_at = IsoDateTimeField()

    class Meta:
        model = StepAttempt
        fields = ["step", "label", "kind", "attempt", "status", "result", "error",
                  "created_at", "running_at", "succeeded_at", "failed_at"]
        read_only_fields = fields


def step_summaries(run_id: uuid.UUID, *, graph: bool = False) -> list[dict[str, object]]:
    """The run detail's step list from plain rows (two queries, no model instances): the
    same fields as ``StepSummarySerializer``, ten times faster for a thousand steps.

    Args:
        run_id: The run.
        graph: Whether it is a graph run (:func:`is_graph_run`: labels and kinds).

    Returns:
        One dict per step, in the order they were recorded.
    """
    last_attempts = {  # ordered by attempt: the last one wins
        attempt["step_id"]: attempt for attempt in StepAttempt.objects.filter(
            step__run_id=run_id).order_by("step_id", "attempt").values(
            "step_id", "created_at", "running_at", "succeeded_at", "failed_at")}
    summaries: list[dict[str, object]] = []
    for step in WorkflowStep.objects.filter(run_id=run_id).order_by("id").values(
            "id", "step_name", "status", "attempt_count", "rpc_name", "branch_taken",
            "child_run_id", "data__duration"):  # a sleep's duration: its kind, not its data
        last = last_attempts.get(step["id"])
        duration = None
        end = (last["succeeded_at"] or last["failed_at"]) if last is not None else None
        if last is not None and end:
            duration = round((end - (last["running_at"] or last["created_at"]))
                             .total_seconds() * 1000)
        summaries.append({
            **step_names(step["step_name"], rpc_name=step["rpc_name"],
                         child_run=step["child_run_id"],
                         data={"duration": step["data__duration"]}, graph=graph),
            "status": step["status"],
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
