"""Running steps: attempts, retries with backoff, time limits, compensation."""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from asgiref.sync import async_to_sync
from django.db import transaction

from ..conf import pikku_settings
from ..durations import parse_duration
from ..exceptions import WorkflowPaused, WorkflowSignal, WorkflowStepFailedError
from ..log_ids import log_extra
from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..status import StepStatus
from ..types import RunId
from . import limits, store, trace_hooks
from .clock import clock
from .dispatch import (
    queued_step_runs_in_pass,
    serves_queue,
    step_dispatcher,
    step_queue_name,
    transport_configured,
)
from .serialization import NotSerializableError, exception_message, normalize
from .timeouts import StepTimeoutError, time_limit

logger = logging.getLogger("pikku_workflows.steps")

# Frozen forever: equal to Pikku's, so invocation ids stay stable across implementations.
INVOCATION_NAMESPACE = uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0001")


def invocation_id(run_id: RunId, step_key: str) -> str:
    """The dedupe key of a step: the same across retries, workers and backends."""
    return str(uuid.uuid5(INVOCATION_NAMESPACE, f"{run_id}:{step_key}"))


class PassContext(Protocol):
    """What running a step needs of its pass: ``dsl.context.WorkflowContext``, which sits
    a layer above this module and calls it (``ctx`` of ``StepCall.invoke`` is its
    ``StepContext``)."""

    run: WorkflowRun
    steps: dict[str, WorkflowStep]
    work: store.UnitOfWork
    waiting_on: set[str]
    fan_out: int

    @property
    def run_id(self) -> str: ...

    def check_due(self) -> bool: ...

    def step_context(self, key: str, attempt: int) -> object: ...

    def run_named_step(self, key: str, fn_or_name: str | Callable[..., Any], data: Any,
                       **options: Any) -> Any: ...


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
    timeout: float | None = None
    limits: tuple[str, ...] = ()

    def invoke(self, ctx: object) -> Any:
        assert self.fn is not None
        if not self.takes_data:
            return self.fn()
        if self.takes_context:
            return self.fn(self.data, ctx)
        return self.fn(self.data)


class AttemptFailed(Exception):
    """One attempt failed; ``error`` is what the attempt records.

    ``interrupt``: a ``KeyboardInterrupt`` the step raised, which the caller re-raises
    once the failed attempt is recorded.
    """

    def __init__(self, error: dict[str, Any], *,
                 interrupt: KeyboardInterrupt | None = None) -> None:
        super().__init__(error["message"])
        self.error = error
        self.interrupt = interrupt


def retry_delay_seconds(retry_delay: float | int | str, attempt: int) -> float:
    """The wait after failed attempt number ``attempt`` (1-based)."""
    if retry_delay == "exponential":
        # Capped before the power: a float of 2 ** 1024 would overflow.
        return min(2.0 ** min(attempt - 1, 64), pikku_settings.MAX_RETRY_DELAY)
    return parse_duration(retry_delay, what="retry_delay")


def error_dict(exc: BaseException) -> dict[str, Any]:
    """How a failed attempt records ``exc`` (its message made storable in JSON)."""
    return {"message": exception_message(exc) or exc.__class__.__name__,
            "type": exc.__class__.__name__}


def _budget(step: WorkflowStep) -> int:
    """How many attempts the step may have made in all: ``retries + 1`` since the last
    ``retry_run`` (which gives a fresh budget), plus the attempts before it."""
    retries = step.retries if step.retries is not None else pikku_settings.DEFAULT_RETRIES
    return step.attempt_base + retries + 1


def is_exhausted(step: WorkflowStep) -> bool:
    """A failed step has no attempts left (or failed in a way no retry can fix)."""
    if step.status != StepStatus.FAILED:
        return False
    return bool((step.error or {}).get("fatal")) or step.attempt_count >= _budget(step)


def next_attempt_at(step: WorkflowStep, error: dict[str, Any]) -> tuple[bool, datetime | None]:
    """After a failed attempt: whether another is allowed, and when (None: at once)."""
    if error.get("fatal") or step.attempt_count >= _budget(step):
        return False, None
    delay = retry_delay_seconds(step.retry_delay or "0", step.attempt_count - step.attempt_base)
    return True, (clock().after(delay) if delay > 0 else None)


def _call(run: Callable[[], Any], timeout: float | None, what: str) -> Any:
    """Call the step; an ``async def`` step's coroutine is run to completion here."""
    with time_limit(timeout, what):
        value = run()
    if not inspect.iscoroutine(value):
        return value
    coroutine = value

    async def completion() -> Any:
        if timeout:
            # On the event loop's thread: the time limit cancels the coroutine itself.
            return await asyncio.wait_for(coroutine, timeout)
        return await coroutine

    try:
        return async_to_sync(completion)()
    except TimeoutError:
        raise StepTimeoutError(f"{what} exceeded its timeout of {timeout:g}s") from None
    finally:
        coroutine.close()  # never awaited when the loop could not start: no warning


class Succeeded(NamedTuple):
    """An attempt's success as recorded: its result as stored, and the run if the same
    write leased it (``store.record_success``'s ``lease_to``)."""

    result: Any
    leased: store.LeasedRun | None = None


def attempt_once(step: WorkflowStep, attempt: Any, run: Callable[[], Any], *, atomic: bool,
                 timeout: float | None, work: store.UnitOfWork | None = None,
                 defer: bool = False, guard: bool = False, lease_to: str | None = None
                 ) -> Succeeded:
    """Run one attempt and record its success.

    ``work``: the pass's unit of work (None on a step worker); ``defer`` leaves the write
    to its next write. ``lease_to``: see ``store.record_success`` (a step worker carrying
    the run on).

    Raises:
        AttemptFailed: The attempt failed (nothing recorded yet: the caller decides
            between a retry and exhaustion). A result that cannot be stored is fatal.
    """
    what = f"step '{step.step_name}'"
    try:
        if atomic:
            # The function's own writes and its recorded result commit together.
            with transaction.atomic():
                result = normalize(_call(run, timeout, what), what=f"the result of {what}")
                store.record_success(step, attempt, result, work=work, guard=guard)
            return Succeeded(result)
        result = normalize(_call(run, timeout, what), what=f"the result of {what}")
    except WorkflowSignal:
        raise
    except store.StaleAttemptError:
        raise
    except NotSerializableError as exc:
        raise AttemptFailed({**error_dict(exc), "fatal": True}) from None
    except Exception as exc:
        raise AttemptFailed(error_dict(exc)) from exc
    except KeyboardInterrupt as exc:
        raise AttemptFailed(error_dict(exc), interrupt=exc) from exc
    except BaseException as exc:
        # SystemExit, GeneratorExit (or asyncio's CancelledError) from the step's code:
        # the attempt failed like any other (the engine's own signals are re-raised above).
        raise AttemptFailed(error_dict(exc)) from exc
    return Succeeded(result, store.record_success(step, attempt, result, work=work, defer=defer,
                                                  guard=guard, lease_to=lease_to))


def _new_row(wf: PassContext, call: StepCall) -> WorkflowStep:
    """An unsaved row for a step reached for the first time (fatal if its data is bad)."""
    step = store.new_step(
        wf.run_id, call.key, rpc_name=call.rpc_name, retries=call.retries,
        retry_delay=str(call.retry_delay), from_step_name=call.from_step_name,
    )
    try:
        step.data = normalize(call.data, what=f"the data of step '{call.key}'")
    except NotSerializableError as exc:
        step.status, step.error = StepStatus.FAILED, {**error_dict(exc), "fatal": True}
        wf.work.save_new_step(step)
        wf.steps[call.key] = step
        raise WorkflowStepFailedError(
            call.key, str(exc), error_type=exc.__class__.__name__) from None
    return step


def _raise_if_exhausted(wf: PassContext, call: StepCall, step: WorkflowStep) -> None:
    if is_exhausted(step):
        _compensate(wf, call, step)
        error = step.error or {}
        raise WorkflowStepFailedError(
            call.key, error.get("message", ""), error_type=error.get("type")
        )


def run_step(wf: PassContext, call: StepCall) -> Any:
    """Return the step's result, running attempts in this process as needed.

    Raises:
        WorkflowStepFailedError: The step is terminally failed (after compensation).
        WorkflowPaused: The next attempt must wait for its retry delay, or a worker
            holds the step (its function was ``queued`` when it was dispatched).
    """
    step = wf.steps.get(call.key)
    if step is not None and step.status == StepStatus.SUCCEEDED:
        if trace_hooks.current is not None:
            trace_hooks.current.replayed(step)
        return step.result
    if step is None:
        step = _new_row(wf, call)
        wf.steps[call.key] = step
    elif step.status == StepStatus.SCHEDULED and store.waiting_for(step):
        if step.wake_at is not None and step.wake_at > clock().now():
            raise WorkflowPaused(call.key, wake_at=step.wake_at)
    elif step.status == StepStatus.SCHEDULED or (
            step.status == StepStatus.RUNNING and step.lease_expires_at is not None
            and step.lease_expires_at > clock().now()):
        wf.waiting_on.add(call.key)
        raise WorkflowPaused(call.key)
    elif step.status == StepStatus.RUNNING:
        # Only a pass that died leaves an in-process step running (passes hold the lease).
        store.fail_lost_attempt(step, retrying=step.attempt_count < _budget(step),
                                work=wf.work)
    call.data = step.data
    while True:
        _raise_if_exhausted(wf, call, step)
        if step.status == StepStatus.FAILED and step.wake_at and step.wake_at > clock().now():
            raise WorkflowPaused(call.key, wake_at=step.wake_at)
        span: trace_hooks.OpenSpan | None = None
        outcome = "interrupted"
        error: dict[str, Any] | None = None
        attempt, held = _begin(wf, call, step)
        try:
            with limits.holding(held, wf.work):
                if trace_hooks.current is not None:
                    span = trace_hooks.current.step_span(wf.run, step, attempt.attempt,
                                                         queued=False)
                # Only a function that takes a context gets one (its invocation id is a hash).
                ctx = wf.step_context(call.key, attempt.attempt) if call.takes_context \
                    else None
                result = attempt_once(step, attempt, lambda: call.invoke(ctx),  # noqa: B023
                                      atomic=call.atomic, timeout=call.timeout, work=wf.work,
                                      defer=True).result
                outcome = "succeeded"
                return result
        except AttemptFailed as failed:
            again, wake_at = next_attempt_at(step, failed.error)
            outcome, error = ("retried" if again else "failed"), failed.error
            store.record_failure(step, attempt, failed.error, wake_at=wake_at, retrying=again,
                                 work=wf.work)
            logger.info("step %s of run %s failed (attempt %s): %s",
                        call.key, wf.run_id, attempt.attempt, failed,
                        extra=log_extra(wf.run_id, workflow=wf.run.workflow, step=call.key,
                                        attempt=attempt.attempt))
            if failed.interrupt is not None:
                raise failed.interrupt from None
        finally:
            if span is not None:
                span.end(outcome, error)


def _begin(wf: PassContext, call: StepCall, step: WorkflowStep
           ) -> tuple[StepAttempt, limits.Held]:
    """The step's next attempt begun, with the slots of its named limits.

    A new step needing one slot takes it in its start's own write (one statement on
    PostgreSQL); otherwise, or when that finds no slot free, the slots are taken first
    (``_acquire_limits``) and the attempt begun apart.

    Raises:
        WorkflowPaused: A limit is full (see ``_acquire_limits``).
        PassAborted: The run is no longer the pass's.
    """
    check_run = wf.check_due()
    if call.limits and step.pk is None:
        take = limits.single_take(call.limits, wf.work)
        if take is not None:
            begun = wf.work.begin_attempt_taking(step, take, check_run=check_run)
            if begun is not None:
                return begun[0], limits.held_by(take, begun[1])
    wf.work.give_back_slots()  # a slot this pass holds is not one it waits for
    held = _acquire_limits(wf, call, step)
    try:
        return wf.work.begin_attempt(step, check_run=check_run), held
    except BaseException:
        limits.release(held)
        raise


def _acquire_limits(wf: PassContext, call: StepCall, step: WorkflowStep) -> limits.Held:
    """The slots of the step's named limits for one attempt in this pass.

    Raises:
        WorkflowPaused: A limit is full: the step waits ``scheduled`` for it (its row
            says which) and the pass ends, to come back at the step's next try.
    """
    if not call.limits:
        return limits.Held()
    taken = limits.acquire(call.limits)
    if isinstance(taken, limits.Held):
        return taken
    now = clock().now()
    if step.pk is None:
        step.status, step.wake_at = StepStatus.SCHEDULED, taken.wake_at
        step.waiting_for_limit, step.waiting_since = taken.limit, now
        wf.work.save_new_step(step)
    else:
        wf.work.flush()
        store.wait_for_limit(step, taken.limit, taken.wake_at, now)
    raise WorkflowPaused(call.key, wake_at=taken.wake_at)


def run_queued_step_in_pass(wf: PassContext, call: StepCall, *, queue: str | None) -> Any:
    """A ``queued=True`` step seen from a pass: its result, or dispatch it and pause.

    A step that is ``scheduled`` or ``running`` is never dispatched again by a replay.
    """
    step = wf.steps.get(call.key)
    if step is not None and step.status == StepStatus.SUCCEEDED:
        if trace_hooks.current is not None:
            trace_hooks.current.replayed(step)
        return step.result
    waiting = step is not None and step.status == StepStatus.SCHEDULED and \
        bool(store.waiting_for(step))
    if (step is None or step.status == StepStatus.FAILED or waiting) and \
            _runs_eagerly(wf, call, queue):
        # First attempts, and retries nobody scheduled, as in-pass steps.
        return run_step(wf, call)
    if step is not None and step.status == StepStatus.RUNNING and step.lease_expires_at is None:
        # Run eagerly by a pass that died (a step worker's claim sets a step lease):
        # its attempt is lost and the retry runs here, as for any in-pass step.
        return run_step(wf, call)
    dispatcher = step_dispatcher(wf.run.inline)
    if step is None:
        step = _new_row(wf, call)
        wf.steps[call.key] = step
        if not wf.fan_out and step.status == StepStatus.PENDING:
            # The pass pauses here: the row goes in already scheduled with the lease's
            # release, and the job after that commits (UnitOfWork.release_lease).
            step.status = StepStatus.SCHEDULED
            wf.work.defer_new_step(step, lambda: dispatcher.dispatch_step(
                wf.run_id, call.key, call.rpc_name or "", queue=queue,
                timeout=call.timeout))
            wf.waiting_on.add(call.key)
            raise WorkflowPaused(call.key)
        wf.work.save_new_step(step)
    call.data = step.data
    _raise_if_exhausted(wf, call, step)
    wf.waiting_on.add(call.key)
    if waiting and step.wake_at is not None and step.wake_at <= clock().now():
        # Due, waiting for a limit this pass found full: its job is sent (a duplicate of
        # a step worker's is harmless: claims decide).
        dispatcher.dispatch_step(wf.run_id, call.key, call.rpc_name or "", queue=queue,
                                 timeout=call.timeout)
        raise WorkflowPaused(call.key)
    if step.status in (StepStatus.SCHEDULED, StepStatus.RUNNING):
        raise WorkflowPaused(call.key)
    if step.status == StepStatus.FAILED:
        # A failed attempt whose retry nobody scheduled (its worker was lost).
        store.requeue_failed(step, wf.work)
    dispatcher.dispatch_step(wf.run_id, call.key, call.rpc_name or "", queue=queue,
                             timeout=call.timeout, at=step.wake_at,
                             on_sent=lambda: store.mark_dispatched(step))
    raise WorkflowPaused(call.key)


def _runs_eagerly(wf: PassContext, call: StepCall, queue: str | None) -> bool:
    """Whether this pass runs a queued step (new, or due for a retry) itself.

    Inside ``queued_steps_inline()``; on a worker serving the step's queue, never inside
    a fan-out, whose steps are spread over the workers; or when the transport declines
    the step (``Executor.accepts_step``). The step then runs as an in-pass step: the same
    rows, attempts, retries and time limit, without a round trip or a second job.
    """
    if wf.run.inline:
        if queued_step_runs_in_pass(True):
            return True
    elif not wf.fan_out and pikku_settings.EAGER_QUEUED_STEPS and \
            serves_queue(queue or step_queue_name(call.rpc_name or "")):
        return True
    return transport_configured() and not step_dispatcher(wf.run.inline).accepts_step(
        call.rpc_name or "", queue)


def _compensate(wf: PassContext, call: StepCall, step: WorkflowStep) -> None:
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
        logger.warning("compensation of step %s in run %s failed: %s", call.key, wf.run_id, exc,
                       extra=log_extra(wf.run_id, workflow=wf.run.workflow, step=call.key))
