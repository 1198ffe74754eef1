"""``GET approvals/``: the open approval gates a user may answer, and what each asks for."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from ..engine import approvals
from ..engine.clock import clock
from ..engine.summary import iso
from ..models import WorkflowStep
from ..status import RunStatus, StepStatus
from ..step_keys import public_step_name
from .permissions import visible_runs


def answerable_gates(user: Any) -> QuerySet[WorkflowStep]:
    """The gates ``user`` may answer now: open, not expired, on suspended runs they may
    approve (their own, or every run with ``approve_workflowrun``), whose policy admits
    them (``approvers`` and ``approver_permission``, as ``approvals.policy_refusal``
    judges them), newest first."""
    uid = user.pk
    admits = (Q(data__approvers="any")
              | Q(data__approvers="owner", run__owner_id=uid)
              | Q(data__approvers="owner", run__owner__isnull=True)
              | (Q(data__approvers="not-initiator") & ~Q(run__owner_id=uid)))
    permissions = sorted(user.get_all_permissions()) if user.is_authenticated else []
    allowed = (Q(data__approver_permission=None) | Q(data__approver_permission__isnull=True)
               | Q(data__approver_permission__in=permissions))
    if not user.is_authenticated:
        return WorkflowStep.objects.none()
    return (WorkflowStep.objects
            .filter(step_name__startswith=approvals.GATE_PREFIX, status=StepStatus.SUSPENDED,
                    run__status=RunStatus.SUSPENDED,
                    run__in=visible_runs(user, "approve").order_by())
            .filter(Q(wake_at__isnull=True) | Q(wake_at__gt=clock().now()))
            .filter(admits, allowed)
            .select_related("run").order_by("-created_at", "-id"))


_TYPES = {"BooleanField": "boolean", "IntegerField": "integer", "FloatField": "number",
          "DecimalField": "number", "CharField": "string", "EmailField": "string",
          "ChoiceField": "choice", "DateTimeField": "date-time", "DateField": "date"}


def decision_fields(policy: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The fields a gate's serializer asks for (name, type, required, choices), or None
    when the gate takes any JSON decision."""
    serializer = approvals.gate_serializer(policy)
    if serializer is None:
        return None
    fields = []
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        described: dict[str, Any] = {
            "name": name, "type": _TYPES.get(type(field).__name__, "json"),
            "required": bool(field.required)}
        choices = getattr(field, "choices", None)
        if choices:
            described["choices"] = [str(key) for key in choices]
        fields.append(described)
    return fields


def describe_gate(gate: WorkflowStep) -> dict[str, Any]:
    """One open gate as ``GET approvals/`` lists it: never the run's input or state."""
    policy = gate.data or {}
    return {
        "run": str(gate.run_id), "workflow": gate.run.workflow,
        "step": public_step_name(gate.step_name), "reason": policy.get("reason"),
        "approvers": policy.get("approvers", "any"),
        "approver_permission": policy.get("approver_permission"),
        "requested_at": iso(gate.created_at), "expires_at": iso(gate.wake_at),
        "fields": decision_fields(policy),
    }
