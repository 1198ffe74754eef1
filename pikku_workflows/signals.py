"""Django signals for run and step transitions, sent after the change commits.

Every signal is sent with ``sender`` = the ``WorkflowRun`` model class, once per
transition, in the process that made the change (the web process for inline runs, the
``pikku_worker`` that ran the pass or the step on the ``rq`` executor), and only once the
transaction that recorded the change has committed: a rolled-back change sends nothing.

Keyword arguments (besides ``signal`` and ``sender``):

- every signal: ``run`` (the run's id, a ``uuid.UUID``: the engine rarely holds a fresh
  row when it records a transition; ``WorkflowRun.objects.get(pk=run)`` loads it);
- run signals: ``workflow`` (the workflow's name);
- ``run_completed``: ``output``; ``run_failed``, ``run_suspended``, ``run_cancelled``:
  ``error`` (the run's ``error`` dict);
- ``run_failure_alert`` (sent only with the ``ALERTS`` setting, after a ``run_failed``
  whose throttle window allows one): ``workflow``, ``error``, ``folded`` (the failures
  of the workflow folded into this alert since the previous one), ``folded_since`` (the
  first of them, or None), ``message`` (one line of text) and ``alert`` (all of it, a
  ``pikku_workflows.alerts.Alert``);
- step signals: ``step`` (the step's key, e.g. ``"Charge"`` or ``"Label#1"``),
  ``step_id``, ``function`` (the step function's registered name; None for an inline
  closure), ``attempt`` (1-based), ``scheduled_at`` (when a queued step's job was sent;
  None for steps run in the pass), ``started_at``, ``finished_at``;
  ``step_failed`` and ``step_retried`` also ``error`` (the attempt's error dict), and
  ``step_retried`` ``wake_at`` (when the next attempt may start; None: at once).

``job_started`` is the transport's, not a transition's: a ``pikku_worker`` sends it as it
starts a job, at once (nothing to commit), with ``kind`` (``"pass"``: an orchestrator
pass or the wake-ups that start passes; ``"step"``: a queued step or a fan-out's steps),
``queue`` (the queue the job came from), ``job_id``, ``ready_at`` (when the job was
enqueued, or fell due if it was delayed) and ``started_at``.

A receiver that raises is logged (logger ``django.dispatch``) and never disturbs the run.
With no receiver connected, sending costs one attribute check.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, cast

from django.db import transaction
from django.dispatch import Signal

from .types import JSONObject, RunId, UserJSON

if TYPE_CHECKING:
    from .models import StepAttempt, WorkflowStep

#: A run was created (``start_workflow``, a child run); not sent again by resume or retry.
run_started = Signal()
#: A run completed; ``output`` is its output.
run_completed = Signal()
#: A run failed; ``error`` says why.
run_failed = Signal()
#: A run suspended (a suspend or approval gate, a missing function, a version conflict).
run_suspended = Signal()
#: A run was cancelled (from inside its body, by ``cancel_run``, or with its parent).
run_cancelled = Signal()
#: A step's attempt succeeded (its result is recorded).
step_succeeded = Signal()
#: A step failed terminally: no attempt is left (or the failure cannot be retried).
step_failed = Signal()
#: A step's attempt failed and another attempt will follow (at ``wake_at``).
step_retried = Signal()
#: A failure alert is due (``ALERTS`` setting, pikku_workflows.alerts): at most one per
#: workflow per throttle window; ``folded`` failures since ``folded_since`` were folded in.
run_failure_alert = Signal()

#: A ``pikku_worker`` started a job (a pass or a queued step): its schedule-to-start.
job_started = Signal()

RUN_SIGNALS = {
    "completed": run_completed,
    "failed": run_failed,
    "suspended": run_suspended,
    "cancelled": run_cancelled,
}


def send_on_commit(signal: Signal, **kwargs: object) -> None:
    """Send ``signal`` once the current transaction commits (at once outside one).

    Nothing is built or registered while no receiver is connected. A ``workflow`` of
    None is looked up when the signal goes out.
    """
    if not signal.receivers:
        return
    transaction.on_commit(partial(_send, signal, kwargs))


def _send(signal: Signal, kwargs: dict[str, object]) -> None:
    from .models import WorkflowRun

    if kwargs.get("workflow", "") is None:
        run_id = cast(uuid.UUID, kwargs["run"])
        kwargs["workflow"] = WorkflowRun.objects.filter(pk=run_id).values_list(
            "workflow", flat=True).first()
    signal.send_robust(sender=WorkflowRun, **kwargs)


def _uuid(value: object) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def send_step_event(signal: Signal, step: WorkflowStep, attempt: StepAttempt | None,
                    **extra: object) -> None:
    """Send a step signal for ``step`` (a ``WorkflowStep``) and its ``attempt`` (a
    ``StepAttempt`` or None); call only when ``signal.receivers``."""
    send_on_commit(
        signal, run=_uuid(step.run_id), step=step.step_name, step_id=step.pk,
        function=step.rpc_name,
        attempt=attempt.attempt if attempt is not None else step.attempt_count,
        scheduled_at=getattr(attempt, "scheduled_at", None),
        started_at=getattr(attempt, "running_at", None), **extra,
    )


def send_run_transition(run_id: RunId, status: str, *, workflow: str | None = None,
                        output: UserJSON = None, error: JSONObject | None = None) -> None:
    """The signal of a run's move to ``status`` (none for ``running``)."""
    signal = RUN_SIGNALS.get(status)
    if signal is None or not signal.receivers:
        return
    run_uuid = _uuid(run_id)
    if status == "completed":
        send_on_commit(signal, run=run_uuid, workflow=workflow, output=output)
    else:
        send_on_commit(signal, run=run_uuid, workflow=workflow, error=error)


def send_job_started(*, kind: str, queue: str, job_id: str, ready_at: datetime | None,
                     started_at: datetime) -> None:
    """Send ``job_started`` now (a worker starting a job changes no row)."""
    if job_started.receivers:
        from .models import WorkflowRun

        job_started.send_robust(sender=WorkflowRun, kind=kind, queue=queue, job_id=job_id,
                                ready_at=ready_at, started_at=started_at)


__all__ = [
    "job_started", "run_cancelled", "run_completed", "run_failed", "run_failure_alert",
    "run_started",
    "run_suspended",
    "step_failed", "step_retried", "step_succeeded",
]
