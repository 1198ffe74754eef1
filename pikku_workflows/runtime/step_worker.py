"""Running one ``queued=True`` step on a step worker, then carrying the run on."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from ..dsl.context import StepContext
from ..durations import parse_duration
from ..engine import limits, store, trace_hooks
from ..engine.clock import clock
from ..engine.dispatch import step_dispatcher
from ..engine.lease_renewal import keep_alive
from ..engine.steps import AttemptFailed, attempt_once, invocation_id, next_attempt_at
from ..exceptions import WorkflowStepFunctionMismatchError
from ..log_ids import log_extra
from ..models import StepAttempt, WorkflowStep
from ..registry import registry
from ..status import RunStatus, StepStatus
from ..types import RunId
from .orchestrator import drive_queued

logger = logging.getLogger("pikku_workflows.worker")

# Outcomes after which the run has news: a step's retry, already re-dispatched, does not.
ENDED = frozenset({"succeeded", "failed"})
# How many claimable steps a drainer reads at a time (it then claims them one by one).
CLAIM_WINDOW = 32


def run_queued_step(run_id: RunId, step_name: str, rpc_name: str) -> str:
    """Execute one queued step if this job may; returns what happened (for logs and tests).

    A job is a no-op when the step does not exist, is not claimable (duplicate or late
    delivery), belongs to a run that is no longer running, names another function than
    the one recorded on the step (a forged or stale message), is not a function step at
    all (a sleep, gate, closure or child-run step), or names a function that is not
    ``queued`` (in-pass steps never run on step workers).
    """
    if not isinstance(rpc_name, str) or not rpc_name or not isinstance(step_name, str):
        # Only function steps are dispatched, always with their function's name.
        logger.error("job for step %r of run %s names no function (%r): nothing was run",
                     step_name, run_id, rpc_name)
        return "not-a-function-step"
    definition = registry.function(rpc_name)
    if definition is not None and definition.queued:
        # One statement finds and claims the step where the database allows it; when it
        # claims nothing, the look below says why.
        claimed = store.claim_named_step(run_id, step_name, rpc_name)
        if claimed is not None:
            return _execute_and_carry_on(*claimed, definition)
    step: WorkflowStep | None
    try:
        # The ORM takes the id as text too (a job's argument); django-stubs: UUID only.
        step = WorkflowStep.objects.select_related("run").get(  # type: ignore[misc]
            run_id=run_id, step_name=step_name)
    except (WorkflowStep.DoesNotExist, ValidationError):
        step = None
    if step is None:
        logger.warning("no step %r in run %s: job ignored", step_name, run_id,
                       extra=log_extra(run_id, step=step_name))
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
    if step.child_run_id is not None or registry.find_workflow(rpc_name) is not None:
        logger.error("job for step %r of run %s names workflow %r: a child-run step is "
                     "never run by a step worker; nothing was run", step_name, run_id, rpc_name)
        return "not-a-function-step"
    definition = registry.function(rpc_name)
    if definition is None:
        return _not_deployed(step)
    if not definition.queued:
        logger.error("job for step %r of run %s names %r, which is not queued: nothing was "
                     "run", step_name, run_id, rpc_name)
        return "not-queued"
    new_attempt = store.claim_step(step)
    if new_attempt is None:
        return "duplicate"
    return _execute_and_carry_on(step, new_attempt, definition)


def _execute_and_carry_on(step: WorkflowStep, attempt: StepAttempt, definition: Any) -> str:
    outcome, leased = _execute(step, attempt, definition, lease_to=store.new_lease_owner())
    if outcome in ENDED:
        if leased is not None:
            # The success took the run's lease too: nothing else of it is in flight.
            drive_queued(leased.run.pk, leased=leased)
        else:
            _carry_on(step.run_id)
    return outcome


def run_queued_steps(run_id: str, rpc_names: list[str]) -> str:
    """Drain a fan-out: claim and execute queued steps of the run one at a time.

    Several such jobs share a fan-out's steps (those calling ``rpc_names``), each claim
    decided by the same guarded UPDATE as a single step job's, until none is left. Only
    steps recorded on the run are run, and only functions registered here as queued.
    Returns a summary of the outcomes.
    """
    names = rpc_names if isinstance(rpc_names, list | tuple) else []  # a forged payload
    runnable = [rpc for rpc in dict.fromkeys(n for n in names if isinstance(n, str))
                if (d := registry.function(rpc)) is not None and d.queued]
    counts: dict[str, int] = {}
    for step, attempt in _claims(run_id, runnable):
        outcome, _ = _execute(step, attempt, registry.function(step.rpc_name or ""))
        counts[outcome] = counts.get(outcome, 0) + 1
    if ENDED & counts.keys():
        _carry_on(run_id)
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "empty"


def _claims(run_id: RunId, rpc_names: list[str]
            ) -> Iterator[tuple[WorkflowStep, StepAttempt]]:
    """Claim, one at a time, the claimable steps of the run calling ``rpc_names``."""
    while rpc_names:
        try:
            candidates = list(
                WorkflowStep.objects.select_related("run").filter(  # type: ignore[misc]
                    Q(wake_at__isnull=True) | Q(wake_at__lte=clock().now()),
                    run_id=run_id, run__status=RunStatus.RUNNING, rpc_name__in=rpc_names,
                    status__in=(StepStatus.PENDING, StepStatus.SCHEDULED),
                ).order_by()[:CLAIM_WINDOW]  # any order: no sort of the whole fan-out
            )
        except ValidationError:
            return
        if not candidates:
            return
        # Drainers reading the same window try it in different orders; a claim lost to
        # another drainer costs one UPDATE, and reading again makes progress.
        random.shuffle(candidates)
        for step in candidates:
            attempt = store.claim_step(step)
            if attempt is not None:
                yield step, attempt


def _execute(step: WorkflowStep, attempt: StepAttempt, definition: Any,
             lease_to: str | None = None) -> tuple[str, store.LeasedRun | None]:
    """Run a claimed step's attempt and record it: ``succeeded``, ``failed``,
    ``retrying`` or ``stale``, and the run if its success leased it (``lease_to``: see
    ``store.record_success``)."""
    run = step.run
    held = None
    if definition.limits:
        taken = limits.acquire(definition.limits)
        if isinstance(taken, limits.Blocked):
            return _wait_for_limit(step, attempt, taken, definition), None
        held = taken
    ctx = StepContext(run_id=str(run.pk), step_name=step.step_name,
                      invocation_id=invocation_id(run.pk, step.step_name),
                      attempt=attempt.attempt, owner_id=run.owner_id)
    args = (step.data, ctx) if definition.takes_context else (step.data,)
    timeout = parse_duration(definition.timeout) if definition.timeout is not None else None
    span = None if trace_hooks.current is None else \
        trace_hooks.current.step_span(run, step, attempt.attempt, queued=True)
    ended = "interrupted"
    error: dict[str, Any] | None = None
    try:
        with limits.holding(held or limits.Held()), \
                keep_alive(lambda: store.renew_step_lease(step.pk)):
            try:
                succeeded = attempt_once(step, attempt, lambda: definition.fn(*args),
                                         atomic=definition.atomic, timeout=timeout, guard=True,
                                         lease_to=lease_to)
            except AttemptFailed as failed:
                outcome = _failed_attempt(step, attempt, failed.error, timeout)
                ended, error = ("retried" if outcome == "retrying" else "failed"), failed.error
                if failed.interrupt is not None:
                    raise failed.interrupt from None
                return outcome, None
            except store.StaleAttemptError as exc:
                logger.warning("%s", exc)
                ended = "stale"
                return "stale", None
        ended = "succeeded"
    finally:
        if span is not None:
            span.end(ended, error)
    return "succeeded", succeeded.leased


def _wait_for_limit(step: WorkflowStep, attempt: StepAttempt, blocked: limits.Blocked,
                    definition: Any) -> str:
    """The limit is full: the claim is taken back, the step waits ``scheduled`` for its
    next try (a job sent for then), and this worker moves on."""
    with transaction.atomic():
        if not store.wait_for_limit(step, blocked.limit, blocked.wake_at, clock().now(),
                                    attempt=attempt):
            return "stale"
        step_dispatcher(False).dispatch_step(
            step.run_id, step.step_name, step.rpc_name or "", queue=definition.queue,
            at=blocked.wake_at)
    return "waiting"


def _not_deployed(step: WorkflowStep) -> str:
    """The function is not registered on this worker: suspend, leaving the step pending.

    Only a step this job could have claimed counts; a stale job changes nothing.
    """
    with transaction.atomic():
        if not store.leave_pending(step):
            return "duplicate"
        store.set_run_status(step.run_id, RunStatus.SUSPENDED, expected=(RunStatus.RUNNING,),
                             error={
            "code": "RPC_NOT_FOUND", "step": step.step_name,
            "message": f"step '{step.step_name}' calls function '{step.rpc_name}', which is "
                       "not registered on the worker",
        })
    return "rpc-not-found"


def _failed_attempt(step: WorkflowStep, attempt: StepAttempt, error: dict[str, Any],
                    timeout: float | None) -> str:
    """Record the failure; if attempts remain, re-dispatch the step (delayed) at once."""
    logger.info("step %s of run %s failed (attempt %s): %s",
                step.step_name, step.run_id, attempt.attempt, error["message"],
                extra=log_extra(step.run_id, step=step.step_name, attempt=attempt.attempt))
    again, wake_at = next_attempt_at(step, error)
    if not again:
        store.record_failure(step, attempt, error, guard=True, retrying=False)
        return "failed"
    with transaction.atomic():
        store.record_failure(step, attempt, error, wake_at=wake_at,
                             status=StepStatus.SCHEDULED, guard=True, retrying=True)
        step_dispatcher(False).dispatch_step(
            step.run_id, step.step_name, step.rpc_name or "", at=wake_at, timeout=timeout,
        )
    return "retrying"


def _carry_on(run_id: RunId) -> None:
    """Continue the run in this process (a step of it ended) unless other steps will
    report back.

    Every finisher commits before it looks (the lease statement looks), so the last one
    to finish sees no step in flight and drives the pass.
    """
    drive_queued(run_id, unless_in_flight=True)
