"""The shapes of the REST API: request bodies, runs, steps, attempts, workflows.

The run detail, steps and attempts are the engine's dicts (``engine/summary.py``, built
without DRF); their serializers here describe them in the OpenAPI schema and render the
same fields (``tests/api/test_paging.py`` holds them to it)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..conf import pikku_settings
from ..durations import parse_duration
from ..engine.summary import (
    is_graph_run,
    iso,
    public_error,
    step_duration_ms,
    step_kind,
    step_summaries,
)
from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..status import RunStatus, StepKind, StepStatus, SuspensionCode
from ..step_keys import public_step_name, step_label
from ..types import JSONObject, UserJSON
from . import schema  # noqa: F401 - registers the named enums with drf-spectacular

__all__ = [
    "ApprovalAnswerSerializer",
    "ApproveBodySerializer",
    "AttemptSerializer",
    "CancelBodySerializer",
    "ErrorSerializer",
    "EventBodySerializer",
    "MessageBodySerializer",
    "PendingApprovalSerializer",
    "ResumeBodySerializer",
    "RunDetailSerializer",
    "RunOutcomeSerializer",
    "RunSummarySerializer",
    "SentSerializer",
    "StartBodySerializer",
    "StartedSerializer",
    "StepSerializer",
    "StepSummarySerializer",
    "TimelineEventSerializer",
    "WorkflowDetailSerializer",
    "WorkflowSerializer",
]


# --- Runs, steps and attempts: the engine's dicts (engine/summary.py) described ----------


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
        return step_summaries(run.pk, graph=is_graph_run(run.workflow, run.graph_hash))


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


# --- Request bodies and the other shapes -------------------------------------------------


class StrictBodySerializer(serializers.Serializer[None]):
    """A request body: a JSON object whose unknown keys are an error naming them."""

    def to_internal_value(self, data: Any) -> Any:
        self._raw_keys = set(data) if isinstance(data, dict) else set()  # nested bodies too
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(self._raw_keys - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {key: ["Unknown field: this body takes " + ", ".join(sorted(self.fields))
                       + "."] for key in unknown})
        return attrs


#: Text with something printable in it and no control characters (the engine refuses
#: them in keys and reasons): a pattern both Python and the schema's readers (ECMA 262)
#: take, so that the schema says what the API takes.
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
#: The same, line breaks and tabs allowed.
PRINTABLE_LINES = (r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f]"
                   r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$")


class FullMatchValidator(RegexValidator):
    """A ``RegexValidator`` matching the whole text: in Python ``$`` also matches before a
    final line break, in the schema's ECMA 262 only at the end."""

    def __call__(self, value: Any) -> None:
        if not isinstance(value, str) or not re.fullmatch(self.regex, value):
            raise DjangoValidationError(self.message, code=self.code, params={"value": value})


class TextField(serializers.CharField):
    """A ``CharField`` that takes text only: DRF's would turn ``123`` into ``"123"``. Unless
    it allows blank text, the schema says so (``minLength: 1``): DRF refuses ``""``.
    ``pattern``: a regular expression the text must match (the schema's ``pattern``)."""

    def __init__(self, *, pattern: str | None = None, **kwargs: Any) -> None:
        if not kwargs.get("allow_blank", False):
            kwargs.setdefault("min_length", 1)
        super().__init__(**kwargs)
        if pattern is not None:
            self.validators.append(FullMatchValidator(
                pattern, message="Enter text with no control characters, not only spaces."))

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class DurationField(serializers.Field[float, Any, Any, Any]):
    """A duration: seconds (a number) or a string like ``"5s"``, ``"2min"``; in seconds."""

    def to_internal_value(self, data: Any) -> float:
        try:
            return parse_duration(data, what="duration")
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: float) -> float:
        return value


class DelayField(DurationField):
    """``start/``'s ``delay``: a duration of 0 or more (seconds or ``"10min"``)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            raise serializers.ValidationError("Enter a duration: seconds or text like '10min'.")
        seconds = super().to_internal_value(data)
        if seconds < 0:
            raise serializers.ValidationError("must be 0 or more")
        return seconds


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 time with its UTC offset (a time without one is refused: whose local
    time would it be?)."""

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            self.fail("invalid", format="ISO 8601")
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            self.fail("invalid", format="ISO 8601, e.g. 2030-01-31T09:00:00+00:00")
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            raise serializers.ValidationError(
                "Give the time with its offset (e.g. 2030-01-31T09:00:00+01:00 or ...Z).")
        return parsed


class RunTimeoutField(DurationField):
    """``run/``'s ``timeout``: more than 0 and at most ``RUN_TIMEOUT``. The schema documents
    it in seconds, its bounds from the settings (``schema.RunTimeoutExtension``); strings
    such as ``"10s"`` are taken too."""

    def to_internal_value(self, data: Any) -> float:
        seconds = super().to_internal_value(data)
        limit = pikku_settings.RUN_TIMEOUT
        if not 0 < seconds <= limit:
            raise serializers.ValidationError(
                f"must be more than 0 and at most RUN_TIMEOUT ({limit:g} seconds)")
        return seconds


class PositiveDurationField(DurationField):
    """A duration of more than 0 (seconds or ``"30min"``): ``start/``'s ``run_timeout``,
    a debounce's ``period`` and ``max_wait``."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            raise serializers.ValidationError("Enter a duration: seconds or text like '10min'.")
        seconds = super().to_internal_value(data)
        if seconds <= 0:
            raise serializers.ValidationError("must be more than 0")
        return seconds


class DebounceBodySerializer(StrictBodySerializer):
    key = TextField(max_length=255, pattern=PRINTABLE,
                    help_text="Starts with the same key within `period` make one run.")
    period = PositiveDurationField(
        required=False, default=5.0,
        help_text="The run starts this long after the last start with the key (default 5 s).")
    max_wait = PositiveDurationField(
        required=False, allow_null=True, default=None,
        help_text="At the latest this long after the first start with the key.")


class StartBodySerializer(StrictBodySerializer):
    data = serializers.JSONField(  # type: ignore[assignment]
        required=False, allow_null=True, default=None,
        help_text="The run input (validated by the workflow).")
    idempotency_key = TextField(
        required=False, allow_null=True, default=None, max_length=200, pattern=PRINTABLE,
        help_text="Starting again with the same key and input returns your existing run "
                  "(200); the same key with another input is a 409. Or the "
                  "`Idempotency-Key` header.")
    start_node = TextField(
        required=False, allow_null=True, default=None, max_length=200,
        help_text="Graph workflows: the declared entry node to start at.")
    start_at = AwareDateTimeField(
        required=False, allow_null=True, default=None,
        help_text="Start the run at this time (ISO 8601 with its offset); until then it is "
                  "`scheduled`. Not with `delay`.")
    delay = DelayField(
        required=False, allow_null=True, default=None,
        help_text="Start the run after this long (seconds, or a duration such as "
                  "`\"10min\"`); until then it is `scheduled`. Not with `start_at`.")
    run_timeout = PositiveDurationField(
        required=False, allow_null=True, default=None,
        help_text="The run fails `DEADLINE_EXCEEDED` if unfinished this long after it "
                  "starts (seconds or a duration such as `\"30min\"`; default: the "
                  "workflow's `timeout`).")
    debounce = DebounceBodySerializer(
        required=False, allow_null=True, default=None,
        help_text="Debounce the start: starts with the same `key` within `period` replace "
                  "the waiting run's input and answer with that run. Not with `start_at`, "
                  "`delay` or an idempotency key.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if attrs.get("start_at") is not None and attrs.get("delay") is not None:
            raise serializers.ValidationError(
                {"delay": ["Give start_at or delay, not both."]})
        if attrs.get("debounce") is not None and (
                attrs.get("start_at") is not None or attrs.get("delay") is not None
                or attrs.get("idempotency_key") is not None):
            raise serializers.ValidationError({"debounce": [
                "debounce cannot be combined with start_at, delay or idempotency_key."]})
        return attrs


class RunBodySerializer(StrictBodySerializer):
    data = serializers.JSONField(  # type: ignore[assignment]
        required=False, allow_null=True, default=None)
    timeout = RunTimeoutField(
        required=False, allow_null=True, default=None,
        help_text="How long to wait for the run (a duration, at most RUN_TIMEOUT, its "
                  "default); past it the answer is 202 and the run goes on.")


class ResumeBodySerializer(StrictBodySerializer):
    data = serializers.JSONField(  # type: ignore[assignment]
        required=False, allow_null=True, default=None,
        help_text="What the wf.suspend() that paused the run returns.")


class CancelBodySerializer(StrictBodySerializer):
    reason = TextField(required=False, allow_null=True, default=None, max_length=1000,
                       pattern=PRINTABLE_LINES)


class RetryBodySerializer(StrictBodySerializer):
    pass


class ForkBodySerializer(StrictBodySerializer):
    from_step = TextField(
        required=False, allow_null=True, default=None, max_length=300, pattern=PRINTABLE,
        help_text="The step to rerun from: its `name` as `steps/` lists it (`Charge#1`, "
                  "`approval:Sign-off`); left out: the first failed step, else the start.")
    input = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text="The fork's input; left out or null: the source run's.")
    reason = TextField(required=False, allow_blank=True, default="", max_length=1000,
                       pattern=PRINTABLE_LINES + "|^$",
                       help_text="Why (kept on the fork and in the run's audit).")


class ApproveBodySerializer(StrictBodySerializer):
    reason = TextField(max_length=280, pattern=PRINTABLE,
                       help_text="The approval gate's reason.")
    decision = serializers.JSONField(help_text="The decision, judged by the gate.")


#: The longest event name, event key, topic or idempotency key of an event or a message
#: (their model columns). Those are taken as sent, never trimmed: a key matches exactly.
SEND_TEXT_MAX_LENGTH = 255


class EventBodySerializer(StrictBodySerializer):
    event = TextField(max_length=SEND_TEXT_MAX_LENGTH, pattern=PRINTABLE, trim_whitespace=False,
                      help_text="The event's name, e.g. `payment.succeeded`.")
    key = TextField(
        required=False, allow_null=True, default=None, max_length=SEND_TEXT_MAX_LENGTH,
        pattern=PRINTABLE, trim_whitespace=False,
        help_text="Which runs it is for: those waiting on this event with this key (e.g. "
                  "an order id). Left out or null: the runs waiting without a key.")
    data = serializers.JSONField(  # type: ignore[assignment]
        required=False, allow_null=True, default=None,
        help_text="What each waiting `wait_for_event` returns.")
    idempotency_key = TextField(
        required=False, allow_null=True, default=None, max_length=SEND_TEXT_MAX_LENGTH,
        pattern=PRINTABLE, trim_whitespace=False,
        help_text="Sending again with the same key and content stores nothing (200, the "
                  "first event's id); with other content, 409. Or the `Idempotency-Key` "
                  "header.")


class MessageBodySerializer(StrictBodySerializer):
    topic = TextField(required=False, default="default", max_length=SEND_TEXT_MAX_LENGTH,
                      pattern=PRINTABLE, trim_whitespace=False,
                      help_text="The topic the run's `recv` reads (first in, first out).")
    data = serializers.JSONField(  # type: ignore[assignment]
        required=False, allow_null=True, default=None,
        help_text="What the run's `recv` returns.")
    idempotency_key = TextField(
        required=False, allow_null=True, default=None, max_length=SEND_TEXT_MAX_LENGTH,
        pattern=PRINTABLE, trim_whitespace=False,
        help_text="Sending again with the same key and content to this run stores nothing "
                  "(200, the first message's id); with other content, 409. Or the "
                  "`Idempotency-Key` header.")


class SentSerializer(serializers.Serializer[JSONObject]):
    """``events/`` and ``runs/{id}/messages/``: what was stored and whom it woke."""

    id = serializers.IntegerField(help_text="The event's or message's id.")
    woken = serializers.IntegerField(help_text="How many waiting runs it woke (0 on a "
                                               "replay: the first send woke them).")


class ApprovalAnswerSerializer(serializers.Serializer[JSONObject]):
    """``approve/``: what became of the decision (never the run's data)."""

    run = serializers.UUIDField()
    step = serializers.CharField(help_text="The gate's step name, `approval:<reason>`.")
    status = NamedChoiceField("PikkuApprovalOutcome",
                              choices=["decided", "rejected", "recorded"])
    decision = serializers.JSONField(allow_null=True)
    errors = serializers.JSONField(  # type: ignore[assignment]
        required=False, help_text="Why the gate rejected the decision (status `rejected`).")


class DecisionFieldSerializer(serializers.Serializer[JSONObject]):
    name = serializers.CharField()
    type = serializers.CharField(help_text="boolean, integer, number, string, choice, "
                                           "date-time, date or json")
    required = serializers.BooleanField()  # type: ignore[assignment]
    choices = serializers.ListField(child=serializers.CharField(), required=False)


class PendingApprovalSerializer(serializers.Serializer[JSONObject]):
    """``approvals/``: an open gate the caller may answer (never the run's data)."""

    run = serializers.UUIDField()
    workflow = serializers.CharField()
    step = serializers.CharField(help_text="The gate's step name, `approval:<reason>`.")
    reason = serializers.CharField(help_text="What `approve/` takes as `reason`.")
    approvers = NamedChoiceField("PikkuApprovers", choices=["any", "owner", "not-initiator"])
    approver_permission = serializers.CharField(allow_null=True)
    requested_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    fields = DecisionFieldSerializer(  # type: ignore[assignment]
        many=True, allow_null=True,
        help_text="What the gate's serializer asks for; null: any JSON decision.")


class StartedSerializer(serializers.Serializer[JSONObject]):
    id = serializers.UUIDField()
    status = status_field(RunStatus)


class RunOutcomeSerializer(StartedSerializer):
    output = serializers.JSONField(allow_null=True)


class ErrorSerializer(serializers.Serializer[JSONObject]):
    """Every error answer: a message, a code, and field errors for invalid bodies."""

    detail = serializers.CharField()
    code = serializers.CharField()
    errors = serializers.JSONField(required=False)  # type: ignore[assignment]


class RunErrorSerializer(ErrorSerializer):
    """``run/`` when the run failed, was cancelled or suspended (``id``, ``status`` and
    ``error``); a workflow whose version is declined answers the error alone."""

    id = serializers.UUIDField(required=False)
    status = status_field(RunStatus, required=False)
    error = PublicErrorField(required=False)


class RunSummarySerializer(serializers.ModelSerializer[WorkflowRun]):
    """A run in lists: no input, output or steps."""

    status = status_field(RunStatus)
    error = PublicErrorField()
    owner = serializers.IntegerField(source="owner_id", read_only=True, allow_null=True)
    parent_run = serializers.UUIDField(source="parent_run_id", read_only=True, allow_null=True)
    created_at = IsoDateTimeField()
    updated_at = IsoDateTimeField()
    finished_at = IsoDateTimeField()

    class Meta:
        model = WorkflowRun
        fields = ["id", "workflow", "status", "error", "owner", "parent_run", "graph_hash",
                  "inline", "created_at", "updated_at", "finished_at"]
        read_only_fields = fields


class TimelineEventSerializer(serializers.Serializer[JSONObject]):
    """``runs/{id}/timeline/``: what happened to an attempt, and when."""

    at = serializers.CharField(help_text="ISO 8601 time of the event.")
    step = StepNameField()
    label = StepLabelField()  # type: ignore[assignment]
    kind = StepKindField()
    attempt = serializers.IntegerField()
    event = NamedChoiceField("PikkuTimelineEvent",
                             choices=["created", "scheduled", "running", "succeeded",
                                      "failed"])
    error = serializers.JSONField(allow_null=True, required=False)


class WorkflowSerializer(serializers.Serializer[JSONObject]):
    """A registered workflow and the status of its current version."""

    name = serializers.CharField()
    source = serializers.CharField(help_text="dsl or graph")  # type: ignore[assignment]
    description = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())
    graph_hash = serializers.CharField()
    version_status = serializers.CharField(
        allow_null=True, help_text="draft, active or declined; null before its first run")


class GraphSerializer(serializers.Serializer[JSONObject]):
    nodes = serializers.ListField(child=serializers.DictField())
    edges = serializers.ListField(child=serializers.DictField())


class WorkflowDetailSerializer(WorkflowSerializer):
    graph = GraphSerializer()
    planned_steps = serializers.ListField(child=serializers.JSONField())
