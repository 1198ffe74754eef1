"""Running one ``queued=True`` step on a step worker, then carrying the run on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from ..conf import pikku_settings
from ..exceptions import WorkflowStepFunctionMismatchError
from ..models import WorkflowStep
from ..registry import registry
from ..status import RunStatus, StepStatus
from . import store
from .clock import clock
from .serialization import NotSerializableError, normalize
from .steps import error_dict, invocation_id, retry_delay_seconds

logger = logging.getLogger("pikku_workflows.worker")


@contextmanager
def keep_alive(renew: Callable[[], None]) -> Iterator[None]:
    """Call ``renew`` from a thread every third of ``LEASE_TIMEOUT`` while the block runs."""
    stop = threading.Event()
    interval = max(pikku_settings.LEASE_TIMEOUT / 3, 0.05)

    def beat() -> None:
        try:
            while not stop.wait(interval):
                renew()
        except Exception:
            logger.exception("lease renewal failed")
        finally:
            connection.close()  # this thread's own database connection

    thread = threading.Thread(target=beat, name="pikku-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_queued_step(run_id: str, step_name: str, rpc_name: str) -> str:
    """Execute one queued step if this job may; returns what happened (for logs and tests).

    A job is a no-op when the step does not exist, is not claimable (duplicate or late
    delivery), belongs to a run that is no longer running, or names another function
    than the one recorded on the step (a forged or stale message).
    """
    step = (
        WorkflowStep.objects.select_related("run")
        .filter(run_id=run_id, step_name=step_name).first()
    )
    if step is None:
        logger.warning("no step %r in run %s: job ignored", step_name, run_id)
        return "missing"
    if step.rpc_name != rpc_name:
        error = WorkflowStepFunctionMismatchError(
            f"job for step {step_name!r} of run {run_id} names function {rpc_name!r}, but "
            f"the step records {step.rpc_name!r}: nothing was run"
        )
        logger.error("%s", error)
        return "mismatch"
    run = step.run
    if run.status != RunStatus.RUNNING:
        return f"run-{run.status}"
    definition = registry.function(rpc_name)
    if definition is None:
        # Not deployed on this worker: suspend, leaving the step pending for resume_run.
        store.set_run_status(run.pk, RunStatus.SUSPENDED, expected=(RunStatus.RUNNING,), error={
            "code": "RPC_NOT_FOUND", "step": step_name,
            "message": f"step '{step_name}' calls function '{rpc_name}', which is not "
                       "registered on the worker",
        })
        return "rpc-not-found"
    attempt = store.claim_step(step)
    if attempt is None:
        return "duplicate"
    from ..dsl.context import StepContext

    ctx = StepContext(run_id=str(run.pk), step_name=step_name,
                      invocation_id=invocation_id(run.pk, step_name), attempt=attempt.attempt,
                      owner_id=run.owner_id)
    outcome = "succeeded"
    with keep_alive(lambda: store.renew_step_lease(step.pk)):
        try:
            args = (step.data, ctx) if definition.takes_context else (step.data,)
            if definition.atomic:
                with transaction.atomic():
                    result = normalize(definition.fn(*args), what=f"the result of step "
                                       f"'{step_name}'")
                    store.record_success(step, attempt, result)
            else:
                result = normalize(definition.fn(*args),
                                   what=f"the result of step '{step_name}'")
                store.record_success(step, attempt, result)
        except NotSerializableError as exc:
            store.record_failure(step, attempt, {**error_dict(exc), "fatal": True})
            outcome = "failed"
        except Exception as exc:
            outcome = _failed_attempt(step, attempt, exc)
    _carry_on(run.pk, outcome)
    return outcome


def _failed_attempt(step: WorkflowStep, attempt: Any, exc: Exception) -> str:
    """Record the failure; if attempts remain, re-dispatch the step (delayed) at once."""
    from ..executors import step_dispatcher

    retries = step.retries if step.retries is not None else pikku_settings.DEFAULT_RETRIES
    logger.info("step %s of run %s failed (attempt %s): %s",
                step.step_name, step.run_id, attempt.attempt, exc)
    if step.attempt_count >= retries + 1:
        store.record_failure(step, attempt, error_dict(exc))
        return "failed"
    delay = retry_delay_seconds(step.retry_delay or "0", step.attempt_count)
    wake_at = clock().after(delay) if delay > 0 else None
    with transaction.atomic():
        store.record_failure(step, attempt, error_dict(exc), wake_at=wake_at,
                             status=StepStatus.SCHEDULED)
        step_dispatcher(False).dispatch_step(
            step.run_id, step.step_name, step.rpc_name or "", at=wake_at,
            timeout=_timeout_of(step.rpc_name),
        )
    return "retrying"


def _timeout_of(rpc_name: str | None) -> float | None:
    from ..durations import parse_duration

    definition = registry.function(rpc_name or "")
    if definition is None or definition.timeout is None:
        return None
    return parse_duration(definition.timeout)


def _carry_on(run_id: Any, outcome: str) -> None:
    """Continue the run in this process unless other steps will report back.

    Every finisher commits before it looks, so the last one to finish sees no step in
    flight and drives the pass.
    """
    if outcome == "retrying" or store.steps_in_flight(run_id):
        return
    from .orchestrator import drive_queued

    drive_queued(run_id)
