"""Approval gates: where decisions are kept, who may decide, and the audit trail."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.utils.module_loading import import_string

from ..conf import pikku_settings
from ..step_keys import APPROVAL_PREFIX
from ..types import RunId
from .clock import clock

logger = logging.getLogger("pikku_workflows.audit")

APPROVER_POLICIES = ("any", "owner", "not-initiator")
GATE_PREFIX = APPROVAL_PREFIX


def record_key(step_key: str) -> str:
    """The run-state key holding the decision for gate ``step_key``.

    Hex keeps free-text reasons out of the key (the state-merge path quotes keys).
    """
    return "__approval_" + step_key.encode().hex()


def gate_keys(reason: str) -> list[str]:
    """The first physical keys a gate of ``reason`` can have, in order."""
    base = GATE_PREFIX + reason
    return [base] + [f"{base}#{n}" for n in range(1, 100)]


def policy_refusal(policy: dict[str, Any], owner_id: Any, user: Any) -> str | None:
    """Why ``user`` may not decide a gate with ``policy`` on a run owned by ``owner_id``."""
    user_id = getattr(user, "pk", None) if user is not None and not getattr(
        user, "is_anonymous", False) else None
    permission = policy.get("approver_permission")
    if permission and (user_id is None or not user.has_perm(permission)):
        return f"deciding this approval requires the permission '{permission}'"
    approvers = policy.get("approvers", "any")
    if approvers == "owner" and owner_id is not None and user_id != owner_id:
        return "only the run's owner may decide this approval"
    if approvers == "not-initiator":
        if user_id is None:
            return "this approval needs a signed-in approver"
        if user_id == owner_id:
            return "the run's initiator may not decide this approval (four eyes)"
    return None


def gate_serializer(policy: dict[str, Any] | None) -> Any:
    """An instance of the DRF serializer a gate validates decisions with, or None (no
    serializer, or its class is no longer importable)."""
    path = (policy or {}).get("serializer") or ""
    try:
        return import_string(path)() if path else None
    except ImportError:
        return None


def load_user(user_id: Any) -> Any:
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()


def describe_errors(errors: Any) -> str:
    """Validation errors as a sentence: ``"approved: Must be a valid boolean."``.

    DRF's errors are dicts and lists of ``ErrorDetail`` strings; their reprs are for
    developers, not for an audit trail or an operator.
    """
    if isinstance(errors, dict):
        if set(errors) == {"message"}:
            return describe_errors(errors["message"])
        return "; ".join(f"{field}: {describe_errors(detail)}" for field, detail in errors.items())
    if isinstance(errors, list | tuple):
        return " ".join(describe_errors(item) for item in errors)
    return str(errors)


def audit(*, run_id: RunId, reason: str, step: str, user_id: Any, outcome: str,
          refusal: str | None = None, at: datetime | None = None) -> None:
    """Send one approval answer to the ``AUDIT`` sink; a failing sink is only logged."""
    entry = {
        "type": "workflow.approval.decided", "outcome": outcome, "run_id": str(run_id),
        "reason": reason, "step": step, "user_id": user_id, "refusal": refusal,
        "at": (at or clock().now()).isoformat(),
    }
    sink = pikku_settings.AUDIT
    try:
        if sink is None:
            logger.info("approval %s: %s", outcome, entry)
        else:
            sink(entry)
    except Exception:
        logger.exception("the approval audit sink failed for run %s", run_id)
