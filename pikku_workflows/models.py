"""The rows that make a workflow durable: runs, their steps, each step's attempts, versions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .status import (
    RunStatus,
    ScheduleOverlap,
    ScheduleSource,
    StepStatus,
    SuspensionCode,
    TickStatus,
    TickTrigger,
    VersionStatus,
    WaitKind,
    WaitOutcome,
    WorkflowSource,
)


class WorkflowRun(models.Model):
    """One execution of a workflow, from start to a terminal status."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.CharField(_("workflow"), max_length=200)
    status = models.CharField(
        _("status"), max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING
    )
    input = models.JSONField(_("input"), null=True, blank=True)
    output = models.JSONField(_("output"), null=True, blank=True)
    error = models.JSONField(
        _("error"), null=True, blank=True, help_text=_('{"message", "code", ...} or null')
    )
    state = models.JSONField(_("state"), default=dict, blank=True)
    inline = models.BooleanField(
        _("inline"), default=False, help_text=_("Runs in the caller's process, not on workers.")
    )
    graph_hash = models.CharField(_("graph hash"), max_length=64, blank=True, default="")
    deterministic = models.BooleanField(_("deterministic"), default=False)
    planned_steps = models.JSONField(_("planned steps"), default=list, blank=True)
    wire = models.JSONField(
        _("wire"), default=dict, blank=True, help_text=_("How the run was started.")
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("owner"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    # The foreign keys' indexes are the Meta's: partial (most runs have none of them), and
    # the owner's is pikku_run_owner_created.
    parent_run = models.ForeignKey(
        "self",
        verbose_name=_("parent run"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="child_runs",
        db_index=False,
    )
    # NULL (not "") means "no key", so the conditional unique constraint ignores it.
    idempotency_key = models.CharField(  # noqa: DJ001
        _("idempotency key"), max_length=200, null=True, blank=True
    )
    # The orchestrator lease: one pass per run at a time; an expired lease belongs to a
    # dead process and may be taken over.
    lease_owner = models.CharField(max_length=64, blank=True, default="", editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A fork (``fork_run``): the run it reruns, from which step, why and by whom. A fork
    # outlives its source (SET_NULL): it is a run of its own.
    forked_from = models.ForeignKey(
        "self",
        verbose_name=_("forked from"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="forks",
        db_index=False,
    )
    # Database defaults too: raw inserts of runs (seeds, older processes during a rolling
    # deploy) leave them out.
    fork_step = models.CharField(
        _("fork step"), max_length=300, blank=True, default="", db_default="",
        help_text=_("The step key the fork reruns from (empty: from the start)."),
    )
    fork_reason = models.TextField(_("fork reason"), blank=True, default="", db_default="")
    forked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("forked by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    # The fork's steps with an id up to this one were copied from its source (kept); the
    # rest it ran itself. NULL: not a fork, or nothing was kept.
    fork_kept_through = models.BigIntegerField(null=True, blank=True, editable=False)
    # A ``scheduled`` run starts at ``start_at`` (a delayed start); NULL with status
    # ``scheduled``: a buffered schedule tick, started when the schedule's previous run ends.
    start_at = models.DateTimeField(_("start at"), null=True, blank=True)
    # The schedule whose tick started the run, and the tick's time (``wf.scheduled_at``).
    schedule = models.ForeignKey(
        "WorkflowSchedule",
        verbose_name=_("schedule"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
        db_index=False,
    )
    scheduled_at = models.DateTimeField(_("scheduled at"), null=True, blank=True)
    # The highest ``WorkflowEvent`` id stored when the run was created: its waits consume
    # only events with a greater id (engine.events: events commit in id order).
    event_watermark = models.BigIntegerField(null=True, blank=True, editable=False)
    # Flow control (DESIGN 8.4, engine.flow). The workflow's concurrency key for this
    # run: NULL when the workflow declares no concurrency ("" for ``key=None``).
    concurrency_key = models.CharField(  # noqa: DJ001 - NULL: no concurrency declared
        _("concurrency key"), max_length=255, null=True, blank=True)
    # Why a ``scheduled`` run waits: "" (a delayed start or a buffered tick),
    # "concurrency" (a slot of its workflow and key), "debounce" (its debounce window).
    waiting_for = models.CharField(_("waiting for"), max_length=16, blank=True, default="",
                                   db_default="")
    # When a run ``scheduled`` for a concurrency slot began waiting for it (the engine's
    # clock; NULL otherwise): the Limits page's oldest wait.
    waiting_since = models.DateTimeField(_("waiting since"), null=True, blank=True,
                                         editable=False)
    # The run fails DEADLINE_EXCEEDED past this moment; set once, when it first leaves
    # ``scheduled`` (from ``run_timeout``), never recomputed (recovery keeps it).
    deadline_at = models.DateTimeField(_("deadline at"), null=True, blank=True)
    # The run's own timeout in seconds (``run_timeout`` or the workflow's ``timeout``),
    # kept until ``deadline_at`` is set from it.
    run_timeout = models.FloatField(_("run timeout"), null=True, blank=True)
    # The debounce key of a debounced start (unique among a workflow's debounce waits).
    debounce_key = models.CharField(  # noqa: DJ001 - NULL: not debounced
        _("debounce key"), max_length=255, null=True, blank=True)
    # With TRACING on: the W3C trace context (``traceparent``, ``tracestate``) of the code
    # that started the run, which its passes' spans link to (pikku_workflows.tracing).
    trace_context = models.JSONField(_("trace context"), null=True, blank=True,
                                     editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)

    class Meta:
        verbose_name = _("workflow run")
        verbose_name_plural = _("workflow runs")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="pikku_run_status_created"),
            models.Index(fields=["workflow", "-created_at"], name="pikku_run_workflow_created"),
            # The console's "waiting for approval" triage list: its whole condition
            # (admin.actions.AT_APPROVAL_GATE), so that the planner counts the index's
            # rows instead of guessing the code's share (a guess of 10 rows at a million
            # runs sorted 100,000 of them).
            models.Index(
                fields=["-created_at"], name="pikku_run_waiting_for_approval",
                condition=models.Q(status="suspended",
                                   error__step__startswith="__workflow_approval:",
                                   error__code__in=["WAITING_FOR_APPROVAL",
                                                    "WORKFLOW_SUSPENDED"]),
            ),
            # The "waiting for an event / a message" triage lists and their counts, shown
            # beside every runs list: without them each count read every suspended run's
            # error (150 ms at a million runs, B9).
            models.Index(fields=["-created_at"], name="pikku_run_waiting_for_event",
                         condition=models.Q(status="suspended",
                                            error__code="WAITING_FOR_EVENT")),
            models.Index(fields=["-created_at"], name="pikku_run_waiting_for_message",
                         condition=models.Q(status="suspended",
                                            error__code="WAITING_FOR_MESSAGE")),
            # Lists filtered by workflow and status (and their bounded counts).
            models.Index(fields=["workflow", "status", "-created_at"],
                         name="pikku_run_wf_status_created"),
            # The unfiltered runs list, newest first, and the date hierarchy's MIN/MAX.
            models.Index(fields=["-created_at"], name="pikku_run_created"),
            # "My runs" (the API's owner scope, the admin's owner filter), newest first; the
            # owner's foreign key uses it too.
            models.Index(fields=["owner", "-created_at"], name="pikku_run_owner_created"),
            # The other foreign keys, NULL on most runs: only runs that have one have an
            # entry (a run's insert and its status changes write none).
            *(models.Index(fields=[field], name=f"pikku_run_{field}",
                           condition=models.Q(**{f"{field}__isnull": False}))
              for field in ("parent_run", "forked_from", "forked_by", "schedule")),
            # The time keeper's promotion of due delayed starts: only scheduled runs.
            models.Index(fields=["start_at"], name="pikku_run_scheduled_start",
                         condition=models.Q(status="scheduled")),
            # Concurrency slots: the holders and the queue of one (workflow, key).
            models.Index(fields=["workflow", "concurrency_key", "status"],
                         name="pikku_run_concurrency",
                         condition=models.Q(concurrency_key__isnull=False)),
            # The time keeper's deadline sweep: only live runs with a deadline.
            models.Index(fields=["deadline_at"], name="pikku_run_deadline",
                         condition=models.Q(deadline_at__isnull=False,
                                            status__in=["scheduled", "running",
                                                        "suspended"])),
            # The dashboard: runs finished in a window (counts per bucket, durations per
            # workflow). Only finished runs have an entry, and it holds every column those
            # reads need, so they skip the table.
            models.Index(fields=["finished_at", "status", "workflow", "created_at"],
                         name="pikku_run_finished",
                         condition=models.Q(finished_at__isnull=False)),
        ]
        # The operator actions of the admin console and the REST API, one permission each.
        permissions = [
            ("start_workflowrun", _("Can start workflow runs from the console")),
            ("resume_workflowrun", _("Can resume suspended workflow runs")),
            ("cancel_workflowrun", _("Can cancel workflow runs")),
            ("retry_workflowrun", _("Can retry failed workflow runs")),
            ("approve_workflowrun", _("Can answer approvals of workflow runs")),
            ("fork_workflowrun", _("Can rerun workflow runs from a step (fork them)")),
        ]
        # Idempotency keys are scoped per (workflow, owner); runs without an owner share
        # one system scope. Two partial indexes rather than one on COALESCE(owner, 0): a
        # project's user model may have a UUID or text primary key.
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "owner", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False, owner__isnull=False),
                name="pikku_run_idempotency_owner",
            ),
            models.UniqueConstraint(
                fields=["workflow", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False, owner__isnull=True),
                name="pikku_run_idempotency_system",
            ),
            # One debounce window per (workflow, key) at a time.
            models.UniqueConstraint(
                fields=["workflow", "debounce_key"],
                condition=models.Q(status="scheduled", waiting_for="debounce"),
                name="pikku_run_debounce_window",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in RunStatus.terminal()

    @property
    def is_forkable(self) -> bool:
        """Whether ``fork_run`` takes this run: finished, or suspended because the deployed
        code no longer replays it (``VERSION_CONFLICT``: rerun it on that code instead)."""
        return self.is_terminal or self.has_version_conflict

    @property
    def has_version_conflict(self) -> bool:
        """Whether the run is suspended with ``VERSION_CONFLICT``."""
        return (self.status == RunStatus.SUSPENDED and isinstance(self.error, dict)
                and self.error.get("code") == SuspensionCode.VERSION_CONFLICT)

    def kept_step(self, step: WorkflowStep) -> bool:
        """Whether ``step`` (one of this run's) was kept from the run it forks."""
        return self.fork_kept_through is not None and step.pk is not None and \
            step.pk <= self.fork_kept_through


class WorkflowStep(models.Model):
    """One physical step key of a run (``name``, ``name#1``, ``__workflow_suspend:r``...).

    The row holds the latest attempt's outcome; ``StepAttempt`` rows keep each attempt.
    """

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the (run, step_name) constraint and the (run, status) index
    # start with it, and every index is one more write per step checkpoint.
    run = models.ForeignKey(
        WorkflowRun, verbose_name=_("run"), on_delete=models.CASCADE, related_name="steps",
        db_index=False,
    )
    step_name = models.CharField(_("step name"), max_length=300)
    # NULL marks steps that call no function (closures, sleeps, gates), as in Pikku.
    rpc_name = models.CharField(  # noqa: DJ001
        _("function"), max_length=200, null=True, blank=True,
        help_text=_("The registered function the step runs; empty for closures and sleeps."),
    )
    data = models.JSONField(_("data"), null=True, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=StepStatus.choices, default=StepStatus.PENDING
    )
    result = models.JSONField(_("result"), null=True, blank=True)
    error = models.JSONField(_("error"), null=True, blank=True)
    attempt_count = models.PositiveIntegerField(_("attempts"), default=0)
    # Attempts made before the last retry_run: the step's budget counts from here. A
    # database default, so the hand-written inserts of the fast path need not name it.
    attempt_base = models.PositiveIntegerField(
        _("attempts before the last retry"), default=0, db_default=0, editable=False)
    retries = models.PositiveIntegerField(_("retries"), null=True, blank=True)
    retry_delay = models.CharField(_("retry delay"), max_length=32, blank=True, default="")
    branch_taken = models.CharField(  # noqa: DJ001 - NULL: no branch was chosen
        _("branch taken"), max_length=200, null=True, blank=True
    )
    from_step_name = models.CharField(  # noqa: DJ001 - NULL: the first step
        _("previous step"), max_length=300, null=True, blank=True
    )
    child_run = models.ForeignKey(
        WorkflowRun,
        verbose_name=_("child run"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # a partial index below: most steps have no child run
    )
    wake_at = models.DateTimeField(_("wake at"), null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The named limit a ``scheduled`` step waits for ("" : none); its next try is wake_at.
    # A database default, so the hand-written inserts of the fast path need not name it.
    waiting_for_limit = models.CharField(
        _("waiting for limit"), max_length=100, blank=True, default="", db_default="",
        editable=False)
    # When the step began waiting for that limit (the engine's clock): its oldest wait.
    waiting_since = models.DateTimeField(_("waiting since"), null=True, blank=True,
                                         editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("workflow step")
        verbose_name_plural = _("workflow steps")
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step_name"], name="pikku_step_run_name_unique"),
        ]
        indexes = [
            models.Index(fields=["run", "status"], name="pikku_step_run_status"),
            # The recovery sweeps' steps: those waiting, by age, and queued attempts, by
            # their lease. An inline step (running without a lease, then succeeded) is in
            # neither: an index entry is one more page written at each checkpoint.
            models.Index(
                fields=["status", "updated_at"], name="pikku_step_waiting_updated",
                condition=models.Q(status__in=["pending", "scheduled", "suspended"]),
            ),
            models.Index(
                fields=["lease_expires_at"], name="pikku_step_leased",
                condition=models.Q(status="running", lease_expires_at__isnull=False),
            ),
            models.Index(
                fields=["child_run"], name="pikku_step_child_run",
                condition=models.Q(child_run__isnull=False),
            ),
            # The steps waiting for a named limit, next try first: a freed slot wakes the
            # first; the Limits page counts them. Other steps have no entry.
            models.Index(
                fields=["waiting_for_limit", "wake_at"], name="pikku_step_limit_wait",
                condition=models.Q(status="scheduled") & ~models.Q(waiting_for_limit=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_name} ({self.status})"


class StepAttempt(models.Model):
    """One attempt of a step, with its lifecycle timestamps (append-only history)."""

    id = models.BigAutoField(primary_key=True)
    step = models.ForeignKey(
        WorkflowStep, verbose_name=_("step"), on_delete=models.CASCADE, related_name="attempts",
        db_index=False,  # the (step, attempt) constraint starts with it
    )
    attempt = models.PositiveIntegerField(_("attempt"))
    status = models.CharField(
        _("status"), max_length=16, choices=StepStatus.choices, default=StepStatus.PENDING
    )
    result = models.JSONField(_("result"), null=True, blank=True)
    error = models.JSONField(_("error"), null=True, blank=True)
    # Not auto_now_add, which would overwrite it with Django's time at the insert: the
    # engine sets it from its clock (the attempt's first timestamp), so that it never
    # comes after the attempt's other timestamps, fake clock included.
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    scheduled_at = models.DateTimeField(_("scheduled at"), null=True, blank=True)
    running_at = models.DateTimeField(_("running at"), null=True, blank=True)
    succeeded_at = models.DateTimeField(_("succeeded at"), null=True, blank=True)
    failed_at = models.DateTimeField(_("failed at"), null=True, blank=True)

    class Meta:
        verbose_name = _("step attempt")
        verbose_name_plural = _("step attempts")
        ordering = ["step_id", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["step", "attempt"], name="pikku_attempt_step_unique"),
        ]
        indexes = [
            # The dashboard's failing steps: failed attempts by time. Only a failure writes
            # an entry, so a step that succeeds costs no more.
            models.Index(fields=["failed_at"], name="pikku_attempt_failed",
                         condition=models.Q(failed_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} ({self.status})"


class WorkflowVersion(models.Model):
    """An immutable definition of a workflow, keyed by its graph hash."""

    workflow = models.CharField(_("workflow"), max_length=200)
    graph_hash = models.CharField(_("graph hash"), max_length=64)
    graph = models.JSONField(_("graph"), default=dict)
    source = models.CharField(_("source"), max_length=8, choices=WorkflowSource.choices)
    status = models.CharField(
        _("status"), max_length=16, choices=VersionStatus.choices, default=VersionStatus.ACTIVE
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("workflow version")
        verbose_name_plural = _("workflow versions")
        ordering = ["workflow", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "graph_hash"], name="pikku_version_workflow_hash_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow}@{self.graph_hash}"


class MirrorOutbox(models.Model):
    """A committed change the ``MIRROR`` has not received yet: written in the transaction
    of the change (only when a mirror is set), deleted once the mirror has the rows."""

    kind = models.CharField(_("kind"), max_length=8)  # "run" or "version"
    key = models.CharField(_("key"), max_length=64)  # the run's or the version's primary key

    class Meta:
        verbose_name = _("mirror outbox entry")
        verbose_name_plural = _("mirror outbox entries")
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class WorkflowSchedule(models.Model):
    """A schedule: runs of ``workflow`` at the instants of a cron or every ``every`` seconds.

    ``every`` and ``catchup`` are stored in seconds. ``next_fire_at`` is the next tick the
    time keeper owes (NULL: none, the schedule ended); only schedules that are due are read.
    """

    name = models.CharField(_("name"), max_length=200, unique=True)
    workflow = models.CharField(_("workflow"), max_length=200)
    cron = models.CharField(_("cron"), max_length=200, blank=True, default="")
    every = models.FloatField(_("every (seconds)"), null=True, blank=True)
    tz = models.CharField(_("time zone"), max_length=64, default="UTC")
    input = models.JSONField(_("input"), null=True, blank=True)
    overlap = models.CharField(_("overlap"), max_length=16, choices=ScheduleOverlap.choices,
                               default=ScheduleOverlap.SKIP)
    catchup = models.FloatField(_("catch-up window (seconds)"), default=0)
    start_at = models.DateTimeField(_("start at"), null=True, blank=True)
    end_at = models.DateTimeField(_("end at"), null=True, blank=True)
    paused = models.BooleanField(_("paused"), default=False)
    source = models.CharField(_("source"), max_length=8, choices=ScheduleSource.choices,
                              default=ScheduleSource.ADMIN)
    next_fire_at = models.DateTimeField(_("next fire at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("workflow schedule")
        verbose_name_plural = _("workflow schedules")
        ordering = ["name"]
        indexes = [
            # One scheduler pass reads the due schedules only, never all of them.
            models.Index(fields=["next_fire_at"], name="pikku_schedule_due",
                         condition=models.Q(paused=False)),
        ]

    def __str__(self) -> str:
        return self.name


class WorkflowScheduleTick(models.Model):
    """One tick of a schedule: what became of it (never silent), and its run if any.

    A ``missed`` row may stand for a whole gap: ``missed_count`` ticks from ``tick_at``
    to ``missed_until``.
    """

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(WorkflowSchedule, verbose_name=_("schedule"),
                                 on_delete=models.CASCADE, related_name="ticks")
    tick_at = models.DateTimeField(_("tick at"))
    status = models.CharField(_("status"), max_length=16, choices=TickStatus.choices)
    run = models.ForeignKey(WorkflowRun, verbose_name=_("run"), null=True, blank=True,
                            on_delete=models.SET_NULL, related_name="+")
    trigger = models.CharField(_("trigger"), max_length=16, choices=TickTrigger.choices,
                               default=TickTrigger.CRON)
    detail = models.TextField(_("detail"), blank=True, default="")
    missed_until = models.DateTimeField(_("missed until"), null=True, blank=True)
    missed_count = models.PositiveIntegerField(_("missed count"), default=0)
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)

    class Meta:
        verbose_name = _("schedule tick")
        verbose_name_plural = _("schedule ticks")
        ordering = ["-tick_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "tick_at"], name="pikku_tick_once"),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.tick_at.isoformat()} ({self.status})"


class WorkflowEvent(models.Model):
    """An event sent with ``send_event``: every run waiting on ``(event, key)`` may
    consume it once (``WorkflowWait.event``)."""

    id = models.BigAutoField(primary_key=True)
    event = models.CharField(_("event"), max_length=255)
    # NULL: sent with no key (matches only waits with no key).
    key = models.CharField(_("key"), max_length=255, null=True, blank=True)  # noqa: DJ001
    data = models.JSONField(_("data"), null=True, blank=True)
    idempotency_key = models.CharField(  # noqa: DJ001 - NULL: no key (not unique)
        _("idempotency key"), max_length=255, null=True, blank=True)
    sent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("sent by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)

    class Meta:
        verbose_name = _("workflow event")
        verbose_name_plural = _("workflow events")
        ordering = ["-id"]
        indexes = [
            # A wait's match: the oldest event of (event, key) after the run's watermark.
            models.Index(fields=["event", "key", "id"], name="pikku_event_match"),
            # pikku_prune: old events first.
            models.Index(fields=["created_at"], name="pikku_event_created"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key"], condition=models.Q(idempotency_key__isnull=False),
                name="pikku_event_idempotency",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} ({self.key})" if self.key is not None else self.event


class WorkflowMessage(models.Model):
    """A message sent to one run with ``send``: received once, by the run's next
    ``wf.recv`` on its topic (first in, first out)."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(WorkflowRun, verbose_name=_("run"), on_delete=models.CASCADE,
                            related_name="messages")
    topic = models.CharField(_("topic"), max_length=255, default="default")
    data = models.JSONField(_("data"), null=True, blank=True)
    idempotency_key = models.CharField(  # noqa: DJ001 - NULL: no key
        _("idempotency key"), max_length=255, null=True, blank=True)
    sent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("sent by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    received_at = models.DateTimeField(_("received at"), null=True, blank=True)
    received_by = models.CharField(  # noqa: DJ001 - NULL: not received yet
        _("received by step"), max_length=300, null=True, blank=True)

    class Meta:
        verbose_name = _("workflow message")
        verbose_name_plural = _("workflow messages")
        ordering = ["id"]
        indexes = [
            # A recv's match: the run's oldest unreceived message on the topic.
            models.Index(fields=["run", "topic", "id"], name="pikku_message_next",
                         condition=models.Q(received_at__isnull=True)),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="pikku_message_idempotency",
            ),
        ]

    def __str__(self) -> str:
        return f"message {self.pk} to {self.run_id} on {self.topic}"


class WorkflowWait(models.Model):
    """One wait of a run that an event, a message or a resume ends, or its timeout."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(WorkflowRun, verbose_name=_("run"), on_delete=models.CASCADE,
                            related_name="waits", db_index=False)
    step = models.CharField(_("step"), max_length=300)
    kind = models.CharField(_("kind"), max_length=16, choices=WaitKind.choices)
    name = models.CharField(_("name"), max_length=300)
    key = models.CharField(_("key"), max_length=255, null=True, blank=True)  # noqa: DJ001
    timeout_at = models.DateTimeField(_("timeout at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    outcome = models.CharField(  # noqa: DJ001 - NULL: open
        _("outcome"), max_length=16, choices=WaitOutcome.choices, null=True, blank=True)
    event = models.ForeignKey(WorkflowEvent, verbose_name=_("event"), null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="consumptions")
    message = models.ForeignKey(WorkflowMessage, verbose_name=_("message"), null=True,
                                blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        verbose_name = _("workflow wait")
        verbose_name_plural = _("workflow waits")
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="pikku_wait_run_step"),
        ]
        indexes = [
            # send_event's wake-up: the open waits on (event, key).
            models.Index(fields=["kind", "name", "key"], name="pikku_wait_open",
                         condition=models.Q(outcome__isnull=True)),
            # The time keeper: open waits whose timeout passed.
            models.Index(fields=["timeout_at"], name="pikku_wait_timeout",
                         condition=models.Q(outcome__isnull=True, timeout_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} of {self.run_id} ({self.outcome or 'open'})"


class FailedRun(WorkflowRun):
    """Triage list of the console: runs that failed."""

    class Meta:
        proxy = True
        verbose_name = _("failed run")
        verbose_name_plural = _("failed runs")
        default_permissions = ()


class SuspendedRun(WorkflowRun):
    """Triage list of the console: runs that are suspended (gates, missing functions)."""

    class Meta:
        proxy = True
        verbose_name = _("suspended run")
        verbose_name_plural = _("suspended runs")
        default_permissions = ()


class ApprovalWaitingRun(WorkflowRun):
    """Triage list of the console: runs suspended at an approval gate."""

    class Meta:
        proxy = True
        verbose_name = _("run waiting for approval")
        verbose_name_plural = _("waiting for approval")
        default_permissions = ()


class RunDashboard(WorkflowRun):
    """The console's dashboard (charts of the runs): a page, no rows of its own."""

    class Meta:
        proxy = True
        verbose_name = _("dashboard")
        verbose_name_plural = _("dashboard")
        default_permissions = ()


class WorkflowLimit(models.Model):
    """A runtime override of a named step limit of ``PIKKU_WORKFLOWS["LIMITS"]``.

    A NULL field falls back to the setting's value; an override of a name the setting
    lacks is shown but limits nothing (no function can name it: the system check).
    """

    name = models.CharField(_("name"), max_length=100, unique=True)
    concurrency = models.PositiveIntegerField(
        _("concurrency"), null=True, blank=True,
        help_text=_("At most this many attempts at once; empty: the setting's value."))
    rate = models.CharField(  # noqa: DJ001 - NULL: the setting's value
        _("rate"), max_length=64, null=True, blank=True,
        help_text=_("At most N starts per period, e.g. 100/min; empty: the setting's value."))
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("updated by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )

    class Meta:
        verbose_name = _("workflow limit")
        verbose_name_plural = _("workflow limits")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


#: The ``until`` of a slot given back (or never taken): long past.
SLOT_FREE = datetime(2000, 1, 1, tzinfo=UTC)


class WorkflowLimitSlot(models.Model):
    """One slot of a named limit: a concurrency slot (``kind`` ``c``, a lease held by
    ``holder`` until ``until``) or a rate slot (``r``: the start it records frees it at
    ``until``, one period later). Free when ``until`` is past (``SLOT_FREE``: given back)."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=1)
    slot = models.PositiveIntegerField()
    holder = models.CharField(max_length=32, blank=True, default="")
    until = models.DateTimeField(default=SLOT_FREE)

    class Meta:
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(fields=["name", "kind", "slot"], name="pikku_limit_slot"),
        ]
        indexes = [
            # A taker reads the slot that freed first: the head of this index, whatever
            # the number of slots taken.
            models.Index(fields=["name", "kind", "until"], name="pikku_limit_slot_free"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.kind}{self.slot}"


class WorkflowAlertThrottle(models.Model):
    """The failure alerts of one workflow (pikku_workflows.alerts): when the last went out,
    and the failures folded in since, which the next alert reports. Shared by every
    process through the database."""

    workflow = models.CharField(max_length=200, unique=True)
    last_alert_at = models.DateTimeField()
    folded = models.PositiveIntegerField(default=0)
    folded_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        default_permissions = ()

    def __str__(self) -> str:
        return self.workflow


class RegisteredWorkflow(models.Model):
    """No table: the console's "Workflows" entry (registered definitions live in code)."""

    class Meta:
        managed = False
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        default_permissions = ("view",)

    def __str__(self) -> str:
        return str(self._meta.verbose_name_plural)
