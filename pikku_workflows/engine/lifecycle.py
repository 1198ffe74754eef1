"""Run lifecycle rules the engine and ``operations`` share: child runs, the cancel
cascade, and keeping a lease alive while a pass or a step runs."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from ..conf import pikku_settings
from ..exceptions import WorkflowError, WorkflowRunStateError
from ..models import WorkflowRun, WorkflowStep
from ..registry import registry
from ..status import RunStatus
from ..types import RunId
from . import store
from .dispatch import get_executor
from .versions import check_startable

# Lease renewals are logged as the step worker's, where they were first written.
logger = logging.getLogger("pikku_workflows.worker")


class _Renewer:
    """One thread per process renewing every lease held by a ``keep_alive`` block.

    A thread started and joined per block cost two thread switches per step job; this
    one is started once and sleeps until the earliest renewal is due.
    """

    # How long the thread sleeps with nothing to renew (a block entered meanwhile whose
    # first renewal is due sooner than that wakes it).
    IDLE = 1.0

    def __init__(self) -> None:
        self.cond = threading.Condition()
        # token -> [due (monotonic), interval, renew, being renewed]
        self.entries: dict[int, list[Any]] = {}
        self.tokens = itertools.count()
        self.thread: threading.Thread | None = None
        self.wake_at = 0.0

    def add(self, renew: Callable[[], None], interval: float) -> int:
        with self.cond:
            token = next(self.tokens)
            due = time.monotonic() + interval
            self.entries[token] = [due, interval, renew, False]
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="pikku-lease",
                                               daemon=True)
                self.wake_at = due
                self.thread.start()
            elif due < self.wake_at:
                self.cond.notify()
        return token

    def remove(self, token: int) -> None:
        """Forget a block's renewal; wait if it is being renewed right now (no renewal
        of it runs after this returns)."""
        with self.cond:
            entry = self.entries.pop(token)
            while entry[3]:
                self.cond.wait()

    def _run(self) -> None:
        try:
            while True:
                with self.cond:
                    now = time.monotonic()
                    due = [e for e in self.entries.values() if e[0] <= now]
                    if not due:
                        self.wake_at = min((e[0] for e in self.entries.values()),
                                           default=now + self.IDLE)
                        self.cond.wait(self.wake_at - now)
                        continue
                    for entry in due:
                        entry[0], entry[3] = now + entry[1], True
                for entry in due:
                    try:
                        entry[2]()
                    except Exception:
                        # Keep beating: one failed renewal must not let the lease lapse.
                        logger.exception("lease renewal failed")
                with self.cond:
                    for entry in due:
                        entry[3] = False
                    self.cond.notify_all()
                # This thread's own connection: kept (CONN_MAX_AGE) unless it broke.
                connection.close_if_unusable_or_obsolete()
        finally:
            connection.close()


_renewer = _Renewer()


def _new_renewer() -> None:
    global _renewer
    _renewer = _Renewer()


# A forked child has none of the parent's threads: it starts its own renewer.
os.register_at_fork(after_in_child=_new_renewer)


@contextmanager
def keep_alive(renew: Callable[[], None]) -> Iterator[None]:
    """Call ``renew`` every third of ``LEASE_TIMEOUT`` while the block runs (from the
    process's lease thread)."""
    renewer = _renewer
    token = renewer.add(renew, max(pikku_settings.LEASE_TIMEOUT / 3, 0.05))
    try:
        yield
    finally:
        renewer.remove(token)


def after_status_change(run: Any, status: str) -> None:
    """Cascade a cancel to live children; wake the parent when a child run ends."""
    if status == RunStatus.CANCELLED:
        store.close_waiting_steps(run.pk, {
            "code": "WORKFLOW_CANCELLED", "type": "WorkflowCancelled",
            "message": f"run {run.pk} was cancelled while this step waited"})

        for child_id in store.live_child_ids(run.pk):
            with contextlib.suppress(WorkflowError):
                cancel_run(child_id, reason=f"parent run {run.pk} was cancelled")
    if run.parent_run_id and status in RunStatus.terminal():
        parent = store.load_run(run.parent_run_id)
        if parent.status == RunStatus.RUNNING:
            get_executor(parent.inline).enqueue_pass(parent.pk, workflow=parent.workflow)


def cancel_run(run_id: RunId, reason: str | None = None) -> WorkflowRun:
    """Cancel a running or suspended run and, through ``after_status_change``, its live
    child runs (``operations.cancel_run``, and the cascade from a cancelled parent).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished.
    """
    run = store.load_run(run_id)
    error = {"code": "WORKFLOW_CANCELLED", "message": reason or "Workflow cancelled"}
    live = (RunStatus.RUNNING, RunStatus.SUSPENDED)
    if not store.set_run_status(run.pk, RunStatus.CANCELLED, expected=live, error=error,
                                workflow=run.workflow):
        raise WorkflowRunStateError(f"run {run.pk} is {run.status}: it cannot be cancelled")
    after_status_change(run, RunStatus.CANCELLED)
    return store.load_run(run.pk)


def create_child_run(parent: WorkflowRun, step: WorkflowStep, name: str, data: Any) -> WorkflowRun:
    """Start workflow ``name`` as the child run of ``parent``'s step; returns it as it stands.

    The child inherits the parent's owner and executor; its end wakes the parent.
    """
    definition = registry.workflow(name)
    check_startable(definition)
    analysis = definition.analysis
    with transaction.atomic():
        child = store.create_run(
            workflow=name, input=data, inline=parent.inline, owner_id=parent.owner_id,
            parent_run_id=parent.pk, graph_hash=analysis.graph_hash,
            deterministic=analysis.deterministic, planned_steps=analysis.planned_steps,
            wire={"type": "workflow", "parent_run": str(parent.pk), "parent_step": step.step_name},
        )
        store.attach_child_run(step, child)
    get_executor(child.inline).enqueue_pass(child.pk)
    return store.load_run(child.pk)
