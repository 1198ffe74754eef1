"""Flow control (DESIGN 8.4): workflow concurrency slots, debounced starts, run deadlines."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Q

from ..declarations import KEY_MAX_LENGTH, Concurrency, Debounce, seconds_of
from ..exceptions import WorkflowInputError
from ..mirror import changing
from ..models import WorkflowRun
from ..signals import run_started, send_on_commit, send_run_transition
from ..status import RunStatus
from ..types import RunId
from .clock import clock
from .dispatch import get_executor
from .store.concurrency import WAITING_CONCURRENCY as WAITING_CONCURRENCY
from .store.concurrency import (
    SlotRun,
    lock_key,
    promote_queued,
    slot_runs,
)

#: ``waiting_for`` of a debounce window (``WAITING_CONCURRENCY``: of a run queued for a
#: concurrency slot).
WAITING_DEBOUNCE = "debounce"
#: Suspension codes that wait for an operator: such runs hold no slot.
OPERATOR_WAITS = frozenset({"RPC_NOT_FOUND", "VERSION_CONFLICT"})
#: The most queued runs one fill promotes (the rest on the next end or pass).
FILL_BATCH = 1000


def deadline_error(run_id: RunId, deadline_at: datetime, where: str) -> dict[str, Any]:
    """The error a run that passed its deadline records."""
    return {"code": "DEADLINE_EXCEEDED",
            "message": f"run {run_id} passed its deadline {deadline_at.isoformat()} "
                       f"({where})"}


# --- declarations ---------------------------------------------------------------------------


def check_timeout(value: Any, what: str) -> float | None:
    """A run timeout in seconds (None: none); it must be positive.

    Raises:
        WorkflowInputError: not a positive duration.
    """
    if value is None:
        return None
    seconds = seconds_of(value, what)
    if seconds <= 0:
        raise WorkflowInputError(f"the {what} {value!r} must be a positive duration")
    return seconds


def concurrency_of(definition: Any) -> Concurrency | None:
    """The workflow's ``Concurrency`` declaration, if any."""
    extra = getattr(definition, "extra", None) or {}
    value = extra.get("concurrency")
    return value if isinstance(value, Concurrency) else None


def timeout_of(definition: Any) -> float | None:
    """The workflow's declared ``timeout`` in seconds, if any."""
    extra = getattr(definition, "extra", None) or {}
    value = extra.get("timeout")
    return float(value) if isinstance(value, int | float) else None


def key_for(concurrency: Concurrency, data: Any, workflow: str) -> str:
    """The concurrency key of a run of ``workflow`` with input ``data``.

    Raises:
        WorkflowInputError: The key path is missing from the input (or its value is
            null), the key callable raised, or the key is too long.
    """
    key = concurrency.key
    if key is None:
        return ""
    what = f"workflow '{workflow}': the concurrency key"
    if callable(key):
        try:
            value = key(data)
        except Exception as exc:  # the user's callable
            raise WorkflowInputError(
                f"{what} callable raised {exc.__class__.__name__}: {exc}") from None
    else:
        value = data
        walked: list[str] = []
        for part in key.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                where = "the input" if not walked else f"input.{'.'.join(walked)}"
                raise WorkflowInputError(
                    f"{what} path '{key}' is missing from the input: {where} has no "
                    f"'{part}'")
            walked.append(part)
    if value is None:
        raise WorkflowInputError(f"{what} ('{key if isinstance(key, str) else 'callable'}') "
                                 "is null in the input")
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True,
                                                            default=str)
    if len(text) > KEY_MAX_LENGTH:
        raise WorkflowInputError(
            f"{what} is {len(text)} characters long; the limit is {KEY_MAX_LENGTH}")
    return text


# --- slots ---------------------------------------------------------------------------------


def _holders(runs: list[SlotRun]) -> list[SlotRun]:
    """Of these live runs (``slot_runs``), those holding a slot: running and suspended
    ones, but those suspended for an operator and the child runs of a live run of the
    same workflow and key (they run under its slot)."""
    live = {(run.workflow, run.key, run.pk) for run in runs if not run.queued}
    return [run for run in runs if not run.queued
            and (run.workflow, run.key, run.parent) not in live
            and not (run.status == RunStatus.SUSPENDED and run.code in OPERATOR_WAITS)]


def holders(workflow: str, key: str) -> list[RunId]:
    """The runs of ``workflow`` holding a slot of ``key``, oldest first (``_holders``)."""
    return [run.pk for run in _holders(slot_runs([workflow], [key]))]


def holder_counts(keys: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """How many runs hold a slot of each (workflow, key) in ``keys``, in one query (keys
    with none are left out)."""
    wanted = set(keys)
    if not wanted:
        return {}
    held = _holders(slot_runs({w for w, _ in wanted}, {k for _, k in wanted}))
    return dict(Counter((run.workflow, run.key) for run in held
                        if (run.workflow, run.key) in wanted))


def queued(workflow: str, key: str) -> Any:
    """The runs waiting for a slot of (``workflow``, ``key``), first in first out."""
    return WorkflowRun.objects.filter(
        workflow=workflow, concurrency_key=key, status=RunStatus.SCHEDULED,
        waiting_for=WAITING_CONCURRENCY).order_by("created_at", "pk")


def fill(workflow: str, key: str, limit: int, now: datetime) -> list[WorkflowRun]:
    """Promote the oldest queued runs into the free slots; the caller holds the lock."""
    return _filled(workflow, key, limit, now).promoted


class _Filled(NamedTuple):
    held: int  # slots held before the fill
    promoted: list[WorkflowRun]
    drained: bool  # no run is left waiting (as far as the fill read)


def _filled(workflow: str, key: str, limit: int, now: datetime) -> _Filled:
    fetch = min(limit, FILL_BATCH)
    runs = slot_runs([workflow], [key], queued=fetch)
    free = limit - len(_holders(runs))
    if free <= 0:
        return _Filled(limit - free, [], False)
    waiting = [run for run in runs if run.queued]
    promoted = [row for row in (_promote(run, now) for run in waiting[:free])
                if row is not None]
    # Drained: the statement read every queued run (fewer than it asked for), and the
    # free slots took them all.
    return _Filled(limit - free, promoted, len(waiting) < fetch and len(waiting) <= free)


def _promote(run: SlotRun, now: datetime) -> WorkflowRun | None:
    with changing("run", run.pk):
        row = promote_queued(run, now)
    if row is not None and run_started.receivers:
        send_on_commit(run_started, run=row.pk, workflow=row.workflow)
    return row


def promote(run: WorkflowRun, now: datetime, *, due: bool = False) -> bool:
    """Move a ``scheduled`` run to ``running`` (its deadline set if it had none); False if
    it was no longer scheduled (or, with ``due``, its ``start_at`` moved past ``now``: a
    debounced start extended its window)."""
    deadline = run.deadline_at
    if deadline is None and run.run_timeout is not None:
        deadline = now + timedelta(seconds=run.run_timeout)
    rows = WorkflowRun.objects.filter(pk=run.pk, status=RunStatus.SCHEDULED)
    if due:
        rows = rows.filter(start_at__lte=now)
    with changing("run", run.pk):
        moved = bool(rows.update(status=RunStatus.RUNNING, waiting_for="", deadline_at=deadline,
                                 updated_at=now, waiting_since=None))
    if moved:
        run.status, run.waiting_for, run.deadline_at = RunStatus.RUNNING, "", deadline
        run.waiting_since = None
        if run_started.receivers:
            send_on_commit(run_started, run=run.pk, workflow=run.workflow)
    return moved


@dataclass
class Admission:
    """What a start under a concurrency limit did."""

    status: str  # the new run's: running, scheduled (queued) or cancelled (skipped)
    promoted: list[WorkflowRun]  # queued runs that took a free slot first
    cancelled: list[WorkflowRun]  # holders cancelled for it (cancel_running)


def admit(workflow: str, key: str, concurrency: Concurrency, *,
          holder_parent: bool = False) -> Admission:
    """Decide, under the key's lock (the caller's transaction), what a new run of
    (``workflow``, ``key``) is: ``running`` with a slot, ``scheduled`` (queued),
    ``cancelled`` (skipped); with ``cancel_running``, the oldest holder is cancelled.

    ``holder_parent``: the run is the child of a live run of the same workflow and key,
    which needs no slot of its own.
    """
    lock_key(workflow, key)
    if holder_parent:
        return Admission(RunStatus.RUNNING, [], [])
    now = clock().now()
    held, promoted, drained = _filled(workflow, key, concurrency.max, now)
    if held + len(promoted) < concurrency.max and (
            drained or not queued(workflow, key).exists()):
        return Admission(RunStatus.RUNNING, promoted, [])
    if concurrency.on_full == "skip":
        return Admission(RunStatus.CANCELLED, promoted, [])
    holding = holders(workflow, key) if concurrency.on_full == "cancel_running" else []
    if holding:
        oldest = WorkflowRun.objects.get(pk=holding[0])
        error = {"code": "WORKFLOW_CANCELLED",
                 "message": f"cancelled to free a concurrency slot of workflow "
                            f"'{workflow}' (key {key!r}, on_full cancel_running)"}
        if _set_status(oldest, RunStatus.CANCELLED, error, now):
            return Admission(RunStatus.RUNNING, promoted, [oldest])
    return Admission(RunStatus.SCHEDULED, promoted, [])


def readmit(run: WorkflowRun, concurrency: Concurrency) -> Admission:
    """Decide, under the key's lock (the caller's transaction), whether a run that holds
    no slot (failed, or suspended for an operator) and is about to run again (a retry, a
    resume, an approval's answer) may run now: ``running`` if a slot of its key is free
    and no run waits for one, else ``scheduled`` (it queues; ``on_full`` applies to new
    starts only: an operator's retry is never skipped, nor does it cancel a holder).

    A child run of the same workflow and key as its parent runs under its parent's slot.
    """
    key = run.concurrency_key or ""
    lock_key(run.workflow, key)
    if run.parent_run_id is not None and WorkflowRun.objects.filter(
            pk=run.parent_run_id, workflow=run.workflow, concurrency_key=key).exists():
        return Admission(RunStatus.RUNNING, [], [])
    promoted = fill(run.workflow, key, concurrency.max, clock().now())
    held = [pk for pk in holders(run.workflow, key) if pk != run.pk]
    if len(held) < concurrency.max and not queued(run.workflow, key).exclude(
            pk=run.pk).exists():
        return Admission(RunStatus.RUNNING, promoted, [])
    return Admission(RunStatus.SCHEDULED, promoted, [])


def holds_slot(run: WorkflowRun) -> bool:
    """Whether ``run`` (as read) counts against its key's slots: running, or suspended
    but not for an operator."""
    if run.status == RunStatus.RUNNING:
        return True
    return run.status == RunStatus.SUSPENDED and not (
        isinstance(run.error, dict) and run.error.get("code") in OPERATOR_WAITS)


def waiting_fields(now: datetime) -> dict[str, Any]:
    """The run fields of a run that begins to wait for a concurrency slot now."""
    return {"waiting_for": WAITING_CONCURRENCY, "waiting_since": now}


def _set_status(run: WorkflowRun, status: str, error: dict[str, Any], now: datetime,
                expected: Iterable[str] = (RunStatus.SCHEDULED, RunStatus.RUNNING,
                                           RunStatus.SUSPENDED)) -> bool:
    with changing("run", run.pk):
        moved = bool(WorkflowRun.objects.filter(pk=run.pk, status__in=list(expected)).update(
            status=status, error=error, updated_at=now, finished_at=now, lease_owner="",
            lease_expires_at=None))
    if moved:
        run.status, run.error = status, error
        send_run_transition(run.pk, status, workflow=run.workflow, error=error)
    return moved


def skipped_error(workflow: str, key: str, limit: int) -> dict[str, Any]:
    """The error of a run skipped by ``on_full="skip"``."""
    return {"code": "CONCURRENCY_LIMITED",
            "message": f"all {limit} concurrency slot(s) of workflow '{workflow}' (key "
                       f"{key!r}) were held: the run was skipped (on_full skip)"}


def arrive(run: WorkflowRun, limit: int, now: datetime, *, buffered: bool = False
           ) -> list[WorkflowRun]:
    """A delayed or debounced run of a workflow with concurrency reached its start (or,
    ``buffered``, a schedule's buffered tick run whose previous run ended): it joins its
    key's queue (its deadline counting from now) and the free slots are filled. Returns
    the runs promoted (to start)."""
    deadline = run.deadline_at
    if deadline is None and run.run_timeout is not None:
        deadline = now + timedelta(seconds=run.run_timeout)
    key = run.concurrency_key or ""
    with transaction.atomic():
        lock_key(run.workflow, key)
        with changing("run", run.pk):
            rows = WorkflowRun.objects.filter(pk=run.pk, status=RunStatus.SCHEDULED)
            if buffered:
                rows = rows.filter(start_at__isnull=True, waiting_for="")
            else:
                rows = rows.filter(start_at__lte=now)
            moved = rows.update(start_at=None, deadline_at=deadline, updated_at=now,
                                **waiting_fields(now))
        if not moved:
            return []
        return fill(run.workflow, key, limit, now)


def expire(run: WorkflowRun, now: datetime) -> bool:
    """Fail a live run past its deadline (the time keeper): a scheduled or suspended
    one, or a running one no pass holds (sleeping, waiting for steps or children). A run a
    pass holds fails at its next step start instead. False: it moved meanwhile."""
    if run.deadline_at is None:
        return False
    rows = WorkflowRun.objects.filter(pk=run.pk, status=run.status,
                                      deadline_at__lte=now)
    if run.status == RunStatus.RUNNING:
        rows = rows.filter(Q(lease_owner="") | Q(lease_expires_at__lt=now))
    where: dict[str, str] = {
        RunStatus.SCHEDULED: f"while waiting to start{_waiting(run)}",
             RunStatus.SUSPENDED: "while suspended",
             RunStatus.RUNNING: "while waiting (sleeping, or for steps or child runs)"}
    error = deadline_error(run.pk, run.deadline_at, where.get(run.status, run.status))
    with changing("run", run.pk):
        moved = bool(rows.update(status=RunStatus.FAILED, error=error, finished_at=now,
                                 updated_at=now, lease_owner="", lease_expires_at=None))
    if moved:
        run.status, run.error = RunStatus.FAILED, error
        send_run_transition(run.pk, RunStatus.FAILED, workflow=run.workflow, error=error)
    return moved


def _waiting(run: WorkflowRun) -> str:
    return f" (for {run.waiting_for})" if run.waiting_for else ""


def release(workflow: str, key: str, limit: int) -> list[WorkflowRun]:
    """A slot of (``workflow``, ``key``) may have freed: promote the oldest queued runs
    into the free slots. Returns the runs promoted (to start)."""
    # A look without the lock first (one statement): most ends have no run queued, or
    # all slots still held. Each process looks after its own end committed, so of ends
    # that overlap, the last to look sees them all (and the time keeper fills the rest).
    runs = slot_runs([workflow], [key], queued=1)
    if not any(run.queued for run in runs) or len(_holders(runs)) >= limit:
        return []
    with transaction.atomic():
        lock_key(workflow, key)
        return fill(workflow, key, limit, clock().now())


_starting = threading.local()


def start_runs(runs: Iterable[WorkflowRun]) -> None:
    """Hand promoted runs to their executors. An inline run ending inside this loop
    promotes the next one: it joins the loop instead of nesting another pass."""
    pending: list[WorkflowRun] | None = getattr(_starting, "pending", None)
    if pending is not None:
        pending.extend(runs)
        return
    _starting.pending = pending = list(runs)
    try:
        while pending:
            run = pending.pop(0)
            # As a new run's first pass (behind the runs started before it, not on the
            # wake-up queue): a steady stream of promotions must not starve the first
            # passes of runs that took a free slot at their start.
            get_executor(run.inline).enqueue_pass(run.pk, new_run=run)
    finally:
        _starting.pending = None


# --- debounce --------------------------------------------------------------------------------


def debounce_window(workflow: str, debounce: Debounce) -> WorkflowRun | None:
    """The run waiting in the debounce window of (``workflow``, key), under its lock."""
    lock_key(workflow, f"debounce\0{debounce.key}")
    return WorkflowRun.objects.filter(
        workflow=workflow, debounce_key=debounce.key, status=RunStatus.SCHEDULED,
        waiting_for=WAITING_DEBOUNCE).first()


def debounce_start_at(first_at: datetime, now: datetime, debounce: Debounce) -> datetime:
    """When a debounced run starts: ``period`` after the last start, at most ``max_wait``
    after the first."""
    start_at = now + timedelta(seconds=debounce.period_seconds)
    max_wait = debounce.max_wait_seconds
    if max_wait is not None:
        start_at = min(start_at, first_at + timedelta(seconds=max_wait))
    result: datetime = start_at
    return result
