"""Runs: their rows, leases and status moves from outside a pass (a pass's end is the
unit of work's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.db.models import F

from ...conf import pikku_settings
from ...mirror import changing
from ...models import StepAttempt, WorkflowRun, WorkflowStep
from ...signals import run_started, send_on_commit, send_run_transition
from ...status import RunStatus
from ...types import RunId
from .. import trace_hooks
from ..clock import clock
from .backends import backend
from .errors import not_found


def run_uuid(run_id: RunId) -> uuid.UUID:
    """A run id as a UUID; a malformed one is an unknown run."""
    try:
        return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        raise not_found(run_id) from None


def load_run(run_id: RunId) -> WorkflowRun:
    """Return the run or raise ``WorkflowRunNotFoundError`` (also for malformed ids)."""
    try:
        return WorkflowRun.objects.get(pk=run_uuid(run_id))
    except WorkflowRun.DoesNotExist:
        raise not_found(run_id) from None


def run_exists(run_id: RunId) -> bool:
    return WorkflowRun.objects.filter(pk=run_id).exists()


def _has_watermark() -> bool:
    """Whether the run model has ``event_watermark`` (the ORM of a schema before
    0015_events has not: tests/unit/test_upgrades.py runs that code)."""
    try:
        WorkflowRun._meta.get_field("event_watermark")
    except FieldDoesNotExist:
        return False
    return True


def event_watermark() -> int:
    """The highest event id stored now (0: none): what a run created now records, so
    that its waits consume only the events stored after it (engine.events)."""
    return backend().event_watermark()


def new_run(**fields: Any) -> WorkflowRun:
    """A run not inserted yet: ``running`` unless ``status`` says ``scheduled``.

    A field given as None that the model lacks is left out: the ORM of a schema older than
    the code (tests/unit/test_upgrades.py hides the newer columns) still starts runs.
    """
    for name in [name for name, value in fields.items() if value is None]:
        try:
            WorkflowRun._meta.get_field(name)
        except FieldDoesNotExist:
            del fields[name]
    if trace_hooks.current is not None and "trace_context" not in fields:
        # The code starting the run: its passes' spans link to it (a child run's, its
        # parent's pass).
        started_from = trace_hooks.current.start_context()
        if started_from is not None:
            fields["trace_context"] = started_from
    return WorkflowRun(**{"status": RunStatus.RUNNING, **fields})


def create_run(**fields: Any) -> WorkflowRun:
    """Insert a run: ``running`` unless ``status`` says ``scheduled`` (not started yet).

    The run records the events stored before it (``event_watermark``, engine.events)."""
    watermark = "event_watermark" not in fields and _has_watermark()
    run = new_run(**fields)
    with changing("run", run.pk):
        backend().insert_run(run, watermark=watermark)
    if run_started.receivers and run.status == RunStatus.RUNNING:
        send_on_commit(run_started, run=run.pk, workflow=run.workflow)
    return run


def insert_runs(runs: list[WorkflowRun]) -> None:
    """Insert runs built by ``new_run`` in one statement (a scheduler pass's ticks)."""
    if not runs:
        return
    if _has_watermark():
        top = event_watermark()
        for run in runs:
            if run.event_watermark is None:
                run.event_watermark = top
    with changing("run", *(run.pk for run in runs)):
        WorkflowRun.objects.bulk_create(runs)
    if run_started.receivers:
        for run in runs:
            if run.status == RunStatus.RUNNING:
                send_on_commit(run_started, run=run.pk, workflow=run.workflow)


def set_run_status(
    run_id: RunId, status: str, *, expected: tuple[str, ...], error: dict[str, Any] | None = None,
    workflow: str | None = None,
) -> bool:
    """Status-guarded transition from one of ``expected`` (used by cancel and resume)."""
    now = clock().now()
    changes: dict[str, Any] = {"status": status, "error": error, "updated_at": now}
    if status in RunStatus.terminal():
        changes.update(finished_at=now, lease_owner="", lease_expires_at=None)
    with changing("run", run_id):
        moved = bool(WorkflowRun.objects.filter(pk=run_id, status__in=expected)
                     .update(**changes))
    if moved:
        send_run_transition(run_id, status, workflow=workflow, error=error)
    return moved


def promote_scheduled_run(run_id: RunId) -> bool:
    """Move a ``scheduled`` run to ``running`` (its time came); False if it was no longer
    scheduled (cancelled, or another time keeper promoted it first)."""
    now = clock().now()
    with changing("run", run_id):
        moved = bool(WorkflowRun.objects.filter(pk=run_id, status=RunStatus.SCHEDULED)
                     .update(status=RunStatus.RUNNING, updated_at=now))
    if moved and run_started.receivers:
        workflow = WorkflowRun.objects.filter(pk=run_id).values_list(
            "workflow", flat=True).first()
        send_on_commit(run_started, run=run_id, workflow=workflow)
    return moved


def lock_run(run_id: RunId) -> WorkflowRun:
    """The run row under ``SELECT ... FOR UPDATE`` (call first in a transaction)."""
    if connection.vendor == "sqlite":
        # SQLite has no row locks: a write first takes the database's write lock (waiting
        # out another writer), where a read first would fail to upgrade to a write once
        # another connection (another process, the mirror's forwarder) had committed.
        WorkflowRun.objects.filter(pk=run_id).update(lease_owner=F("lease_owner"))
    return WorkflowRun.objects.select_for_update().get(pk=run_id)


def drop_orphans(run_id: RunId, step_ids: Iterable[int | None]) -> None:
    """Delete the rows a pass wrote for a run deleted under it: its steps inserted since,
    and the attempts of ``step_ids`` (the pass's steps)."""
    StepAttempt.objects.filter(step_id__in=[pk for pk in step_ids if pk is not None]).delete()
    WorkflowStep.objects.filter(run__pk=run_id).delete()


# --- the run lease -------------------------------------------------------------------


def new_lease_owner() -> str:
    return uuid.uuid4().hex


def lease_until(now: datetime) -> datetime:
    """When a lease taken or renewed at ``now`` expires."""
    return now + timedelta(seconds=pikku_settings.LEASE_TIMEOUT)


def take_lease(run_id: RunId, owner: str, *, unless_in_flight: bool = False) -> WorkflowRun | None:
    """Lease a running run whose lease is free, expired or ours; its row, or None.

    With ``unless_in_flight``, only when none of its queued steps or child runs will
    still report back. One ``UPDATE ... RETURNING`` where the database has it.
    """
    now = clock().now()
    return backend().take_lease(run_uuid(run_id), owner, now, lease_until(now),
                                unless_in_flight=unless_in_flight)


def leased_fields(owner: str) -> dict[str, Any]:
    """The lease fields of a run created already leased by ``owner``."""
    return {"lease_owner": owner, "lease_expires_at": lease_until(clock().now())}


def renew_run_lease(run_id: RunId, owner: str) -> None:
    WorkflowRun.objects.filter(pk=run_id, lease_owner=owner).update(
        lease_expires_at=lease_until(clock().now())
    )
