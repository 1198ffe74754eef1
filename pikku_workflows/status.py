"""Status values of runs, steps, attempts and versions (the strings Pikku uses)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class RunStatus(models.TextChoices):
    # Created, not started yet: a delayed start (``start_at``), a buffered schedule tick.
    SCHEDULED = "scheduled", _("Scheduled")
    RUNNING = "running", _("Running")
    SUSPENDED = "suspended", _("Suspended")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")

    @classmethod
    def terminal(cls) -> frozenset[str]:
        """The statuses a run never leaves."""
        return frozenset({cls.COMPLETED, cls.FAILED, cls.CANCELLED})


class StepStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    SCHEDULED = "scheduled", _("Scheduled")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    SUSPENDED = "suspended", _("Suspended")


def waits_to_retry(step_status: str, wake_at: object, run_status: str) -> bool:
    """Whether a step is a failed attempt of a live run whose next attempt is due at
    ``wake_at``: "retrying" to an operator, not failed (the console's graph, steps table
    and step filters say so alike)."""
    return step_status == StepStatus.FAILED and wake_at is not None \
        and run_status not in RunStatus.terminal()


class StepKind(models.TextChoices):
    """What a step is, as the API names it (``pikku_workflows.engine.summary.step_kind``)."""

    STEP = "step", _("Step")
    CLOSURE = "closure", _("Inline closure")
    CHILD = "child", _("Child run")
    APPROVAL = "approval", _("Approval gate")
    SUSPEND = "suspend", _("Suspend gate")
    SLEEP = "sleep", _("Sleep")
    EVENT = "event", _("Event wait")
    MESSAGE = "message", _("Message wait")
    COMPENSATION = "compensation", _("Compensation (on_error)")
    PATCH = "patch", _("Patch marker")


class SuspensionCode(models.TextChoices):
    """Why a ``suspended`` run waits: its ``error.code`` (DESIGN section 1.1), which decides
    what an operator may do with it."""

    #: ``wf.suspend(reason)``: resume (with data) or cancel.
    WORKFLOW_SUSPENDED = "WORKFLOW_SUSPENDED", _("Suspended (waits for a resume)")
    #: An approval gate: approve or reject (``approve_step``) or cancel; never resume.
    WAITING_FOR_APPROVAL = "WAITING_FOR_APPROVAL", _("Waiting for approval")
    #: A step's function is not deployed: resume after the deploy, or cancel.
    RPC_NOT_FOUND = "RPC_NOT_FOUND", _("Function not found")
    #: The code diverged from the run's recorded steps: resume (re-checks) or cancel.
    VERSION_CONFLICT = "VERSION_CONFLICT", _("Version conflict")
    #: ``wf.wait_for_event``: send the event (``send_event``) or cancel.
    WAITING_FOR_EVENT = "WAITING_FOR_EVENT", _("Waiting for an event")
    #: ``wf.recv``: send the run a message (``send``) or cancel.
    WAITING_FOR_MESSAGE = "WAITING_FOR_MESSAGE", _("Waiting for a message")

    @classmethod
    def resumable(cls) -> frozenset[str]:
        """The codes of the runs ``resume_run`` may continue."""
        return frozenset({cls.WORKFLOW_SUSPENDED, cls.RPC_NOT_FOUND, cls.VERSION_CONFLICT})


class VersionStatus(models.TextChoices):
    DRAFT = "draft", _("Draft")
    ACTIVE = "active", _("Active")
    DECLINED = "declined", _("Declined")


class WorkflowSource(models.TextChoices):
    DSL = "dsl", _("DSL (replayed Python)")
    GRAPH = "graph", _("Graph")


TERMINAL_RUN_STATUSES = RunStatus.terminal()


class ScheduleOverlap(models.TextChoices):
    """What a schedule's tick does while the schedule's previous run is live."""

    SKIP = "skip", _("Skip")
    BUFFER_ONE = "buffer_one", _("Buffer one")
    ALLOW = "allow", _("Allow")
    CANCEL_PREVIOUS = "cancel_previous", _("Cancel previous")


class ScheduleSource(models.TextChoices):
    """Where a schedule was declared: in a ``workflows.py`` or in the admin."""

    CODE = "code", _("Code")
    ADMIN = "admin", _("Admin")


class TickStatus(models.TextChoices):
    """What became of a schedule tick."""

    STARTED = "started", _("Started")
    SKIPPED = "skipped", _("Skipped")
    BUFFERED = "buffered", _("Buffered")
    MISSED = "missed", _("Missed")


class TickTrigger(models.TextChoices):
    """What made a tick."""

    CRON = "cron", _("Cadence")
    MANUAL = "manual", _("Manual")
    BACKFILL = "backfill", _("Backfill")
    CATCHUP = "catchup", _("Catch-up")


class WaitKind(models.TextChoices):
    """What a ``WorkflowWait`` waits for."""

    EVENT = "event", _("Event")
    MESSAGE = "message", _("Message")
    SUSPEND = "suspend", _("Suspend (resume)")


class WaitOutcome(models.TextChoices):
    """How a ``WorkflowWait`` ended."""

    RECEIVED = "received", _("Received")
    TIMED_OUT = "timed_out", _("Timed out")
    CANCELLED = "cancelled", _("Cancelled")
