"""Running one step inside a pass: attempts, retries with backoff, compensation."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ..conf import pikku_settings
from ..durations import parse_duration
from ..exceptions import WorkflowPaused, WorkflowSignal, WorkflowStepFailedError
from ..models import WorkflowStep
from ..status import StepStatus
from . import store
from .clock import clock
from .serialization import NotSerializableError, normalize

if TYPE_CHECKING:
    from ..dsl.context import StepContext, WorkflowContext

logger = logging.getLogger("pikku_workflows.steps")

# Frozen forever: equal to Pikku's, so invocation ids stay stable across implementations.
INVOCATION_NAMESPACE = uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0001")


def invocation_id(run_id: Any, step_key: str) -> str:
    """The dedupe key of a step: the same across retries, workers and backends."""
    return str(uuid.uuid5(INVOCATION_NAMESPACE, f"{run_id}:{step_key}"))


@dataclass
class StepCall:
    """Everything a pass needs to run (or find the recorded outcome of) one step."""

    key: str
    fn: Callable[..., Any] | None
    rpc_name: str | None
    data: Any
    retries: int
    retry_delay: float | int | str
    takes_data: bool = True
    takes_context: bool = False
    atomic: bool = False
    on_error: str | None = None
    from_step_name: str | None = None

    def invoke(self, ctx: StepContext) -> Any:
        assert self.fn is not None
        if not self.takes_data:
            return self.fn()
        if self.takes_context:
            return self.fn(self.data, ctx)
        return self.fn(self.data)


def retry_delay_seconds(retry_delay: float | int | str, attempt: int) -> float:
    """The wait after failed attempt number ``attempt`` (1-based)."""
    if retry_delay == "exponential":
        return min(float(2 ** (attempt - 1)), pikku_settings.MAX_RETRY_DELAY)
    return parse_duration(retry_delay, what="retry_delay")


def error_dict(exc: BaseException) -> dict[str, Any]:
    return {"message": str(exc) or exc.__class__.__name__, "type": exc.__class__.__name__}


def is_exhausted(step: WorkflowStep) -> bool:
    """A failed step has no attempts left (or failed in a way no retry can fix)."""
    if step.status != StepStatus.FAILED:
        return False
    if (step.error or {}).get("fatal"):
        return True
    retries = step.retries if step.retries is not None else pikku_settings.DEFAULT_RETRIES
    return step.attempt_count >= retries + 1


def run_step(wf: WorkflowContext, call: StepCall) -> Any:
    """Return the step's result, running attempts in this process as needed.

    Raises:
        WorkflowStepFailedError: The step is terminally failed (after compensation).
        WorkflowPaused: The next attempt must wait for its retry delay.
    """
    step = wf.steps.get(call.key)
    if step is not None and step.status == StepStatus.SUCCEEDED:
        return step.result
    if step is None:
        step = store.new_step(
            wf.run_id, call.key, rpc_name=call.rpc_name, retries=call.retries,
            retry_delay=str(call.retry_delay), from_step_name=call.from_step_name,
        )
        try:
            step.data = normalize(call.data, what=f"the data of step '{call.key}'")
        except NotSerializableError as exc:
            step.data = None
            return _fail_fatally(wf, call, step, exc)
        wf.steps[call.key] = step
    elif step.status == StepStatus.RUNNING:
        # Only a pass that died leaves an in-process step running (passes hold the lease).
        store.fail_lost_attempt(step)
    call.data = step.data
    while True:
        if is_exhausted(step):
            _compensate(wf, call, step)
            raise WorkflowStepFailedError(
                call.key, step.error.get("message", ""), error_type=step.error.get("type")
            )
        if step.status == StepStatus.FAILED and step.wake_at and step.wake_at > clock().now():
            raise WorkflowPaused(call.key, wake_at=step.wake_at)
        outcome = _attempt(wf, call, step)
        if outcome is not _FAILED:
            return outcome


_FAILED = object()


def run_queued_step_in_pass(wf: WorkflowContext, call: StepCall, *, queue: str | None,
                            timeout: float | None) -> Any:
    """A ``queued=True`` step seen from a pass: its result, or dispatch it and pause.

    A step that is ``scheduled`` or ``running`` is never dispatched again by a replay.
    """
    from ..executors import step_dispatcher

    step = wf.steps.get(call.key)
    if step is not None and step.status == StepStatus.SUCCEEDED:
        return step.result
    dispatcher = step_dispatcher(wf.run.inline)
    if step is None:
        step = store.new_step(
            wf.run_id, call.key, rpc_name=call.rpc_name, retries=call.retries,
            retry_delay=str(call.retry_delay), from_step_name=call.from_step_name,
        )
        try:
            step.data = normalize(call.data, what=f"the data of step '{call.key}'")
        except NotSerializableError as exc:
            return _fail_fatally(wf, call, step, exc)
        step.save(force_insert=True)
        wf.steps[call.key] = step
    call.data = step.data
    if is_exhausted(step):
        _compensate(wf, call, step)
        raise WorkflowStepFailedError(
            call.key, step.error.get("message", ""), error_type=step.error.get("type")
        )
    if step.status in (StepStatus.SCHEDULED, StepStatus.RUNNING):
        wf.waiting_on.add(call.key)
        raise WorkflowPaused(call.key)
    if step.status == StepStatus.FAILED:
        # A failed attempt whose retry nobody scheduled (its worker was lost).
        store.requeue_failed(step)
    dispatcher.dispatch_step(wf.run_id, call.key, call.rpc_name or "", queue=queue,
                             timeout=timeout, at=step.wake_at,
                             on_sent=lambda: store.mark_dispatched(step))
    wf.waiting_on.add(call.key)
    raise WorkflowPaused(call.key)


def _attempt(wf: WorkflowContext, call: StepCall, step: WorkflowStep) -> Any:
    attempt = store.begin_attempt(wf.run_id, wf.lease_owner, step, check_run=wf.check_due())
    ctx = wf.step_context(call.key, attempt.attempt)
    try:
        if call.atomic:
            # The function's own writes and its recorded result commit together.
            with transaction.atomic():
                result = normalize(call.invoke(ctx), what=f"the result of step '{call.key}'")
                store.record_success(step, attempt, result)
        else:
            result = normalize(call.invoke(ctx), what=f"the result of step '{call.key}'")
            store.record_success(step, attempt, result, defer=True)
        return result
    except WorkflowSignal:
        raise
    except NotSerializableError as exc:
        _record_fatal(step, attempt, exc)
    except Exception as exc:
        wake_at = _next_wake(step, exc)
        store.record_failure(step, attempt, error_dict(exc), wake_at=wake_at)
        logger.info("step %s of run %s failed (attempt %s): %s",
                    call.key, wf.run_id, attempt.attempt, exc)
    return _FAILED


def _next_wake(step: WorkflowStep, exc: Exception) -> datetime | None:
    retries = step.retries if step.retries is not None else pikku_settings.DEFAULT_RETRIES
    if step.attempt_count >= retries + 1:
        return None
    delay = retry_delay_seconds(step.retry_delay or "0", step.attempt_count)
    return clock().after(delay) if delay > 0 else None


def _record_fatal(step: WorkflowStep, attempt: Any, exc: Exception) -> None:
    store.record_failure(step, attempt, {**error_dict(exc), "fatal": True})


def _fail_fatally(wf: WorkflowContext, call: StepCall, step: WorkflowStep, exc: Exception) -> Any:
    step.status = StepStatus.FAILED
    step.error = {**error_dict(exc), "fatal": True}
    step.save(force_insert=True)
    wf.steps[call.key] = step
    raise WorkflowStepFailedError(call.key, str(exc), error_type=exc.__class__.__name__)


def _compensate(wf: WorkflowContext, call: StepCall, step: WorkflowStep) -> None:
    """Run ``on_error`` once, as its own durable step ``<key>:onError``."""
    if not call.on_error:
        return
    error = {k: v for k, v in (step.error or {}).items() if k in ("message", "type")}
    try:
        wf.run_named_step(
            f"{call.key}:onError", call.on_error, {"error": error, "input": call.data},
            retries=0, from_step_name=call.key,
        )
    except WorkflowStepFailedError as exc:
        logger.warning("compensation of step %s in run %s failed: %s", call.key, wf.run_id, exc)
