"""Who may read and steer which runs through the API: Django's model permissions, as in
the admin, for staff and non-staff alike; owners keep their rights on their own runs."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from ..models import WorkflowRun

#: The view action -> the model permission it needs on another user's run.
ACTION_PERMISSIONS = {
    "resume": "resume_workflowrun",
    "cancel": "cancel_workflowrun",
    "retry": "retry_workflowrun",
    "approve": "approve_workflowrun",
    "fork": "fork_workflowrun",
    "destroy": "delete_workflowrun",
    "messages": "resume_workflowrun",
}
#: How the 403 names each action whose verb is not the action's own name.
_VERBS = {"destroy": "delete", "messages": "send a message to"}
#: Sending an event (``POST events/``): it may wake any run waiting for it.
SEND_EVENT_PERMISSION = "pikku_workflows.add_workflowevent"
VIEW_PERMISSION = "pikku_workflows.view_workflowrun"


def _has(user: Any, codename: str) -> bool:
    return bool(user.is_authenticated and user.has_perm(f"pikku_workflows.{codename}"))


def owns(user: Any, run: WorkflowRun) -> bool:
    """Whether ``user`` is the run's owner (ownerless runs are nobody's)."""
    return bool(user.is_authenticated and run.owner_id is not None
                and run.owner_id == user.pk)


def may_read(user: Any, run: WorkflowRun) -> bool:
    """Whether ``user`` may read ``run``: its owner, or a holder of ``view_workflowrun``."""
    return owns(user, run) or _has(user, "view_workflowrun")


def visible_runs(user: Any, action: str | None) -> QuerySet[WorkflowRun]:
    """The runs ``user`` may address with ``action``; any other run answers 404.

    Holders of ``view_workflowrun`` see every run; holders of ``approve_workflowrun``
    may answer gates of every run (the answer carries the decision, never the run's
    data); everyone else sees their own runs.
    """
    runs = WorkflowRun.objects.order_by("-created_at")
    if not user.is_authenticated:
        return runs.none()  # ownerless runs are nobody's to read
    if _has(user, "view_workflowrun") or (
            action == "approve" and _has(user, "approve_workflowrun")):
        return runs
    return runs.filter(owner_id=user.pk)


class RunActionPermission(BasePermission):
    """An action on a run the user can see: the owner may; others need the action's
    model permission (403 naming it)."""

    message = "You may not do this to another user's run."

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        codename = ACTION_PERMISSIONS.get(getattr(view, "action", None) or "")
        if codename is None or owns(request.user, obj) or _has(request.user, codename):
            return True
        verb = _VERBS.get(view.action, view.action)
        self.message = (f"To {verb} another user's run you need the permission "
                        f"'pikku_workflows.{codename}'.")
        return False


class SendEventPermission(BasePermission):
    """``POST events/`` needs ``add_workflowevent`` (an event may wake anyone's runs)."""

    message = f"To send an event you need the permission '{SEND_EVENT_PERMISSION}'."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user.is_authenticated
                    and request.user.has_perm(SEND_EVENT_PERMISSION))
