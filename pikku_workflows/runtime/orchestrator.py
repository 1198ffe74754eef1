"""One orchestrator pass: replay a run's body from the top against its recorded steps."""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import cast

from django.db import InterfaceError, OperationalError

from ..dsl.context import WorkflowContext
from ..engine import flow, lifecycle, store, trace_hooks
from ..engine.approvals import describe_errors
from ..engine.clock import clock
from ..engine.dispatch import get_executor
from ..engine.lease_renewal import keep_alive
from ..engine.serialization import (
    NotSerializableError,
    exception_message,
    normalize,
    validated_json,
)
from ..exceptions import (
    WorkflowCancelled,
    WorkflowDeadlineExceeded,
    WorkflowError,
    WorkflowPaused,
    WorkflowRunNotFoundError,
    WorkflowStepFailedError,
    WorkflowSuspended,
)
from ..graph.definition import GraphDefinition
from ..graph.runner import GraphRunError, run_graph
from ..log_ids import log_extra
from ..models import WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import WorkflowLike, registry
from ..status import RunStatus, WorkflowSource
from ..step_keys import asked_in_order
from ..types import JSONObject, RunId, UserJSON

logger = logging.getLogger("pikku_workflows.orchestrator")

#: The package's own directory: frames under it are the engine's, not the user's.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: The most of a body's traceback a run records (its end, where the error is).
MAX_TRACEBACK_CHARS = 16_000


class PassEnd(StrEnum):
    """How a pass ended when the run did not reach a status of its own."""

    PAUSED = "paused"  # waiting: a sleep or retry delay (``wake_at``), a step, a child
    BUSY = "busy"  # another process holds the run's lease
    IN_FLIGHT = "in-flight"  # skipped: a queued step or child run will report back
    ABORTED = "aborted"  # the run changed under the pass (cancelled from outside)
    AGAIN = "again"  # run another pass now


@dataclass(frozen=True)
class PassOutcome:
    """What a pass ended with: the run's status, or how it ended without one."""

    kind: RunStatus | PassEnd
    wake_at: datetime | None = None
    workflow: str | None = None


def run_pass(run_id: RunId, *, new_run: WorkflowRun | None = None,
             unless_in_flight: bool = False, leased: store.LeasedRun | None = None
             ) -> PassOutcome:
    """Replay the run once. Never raises for the body's own errors: they fail the run.

    Args:
        run_id: The run.
        new_run: The run row, if this process just created it leased (it has no steps).
        unless_in_flight: Skip the pass (``in-flight``) while a queued step or child
            run of the run will still report back.
        leased: The run, already leased by this process (``lease_owner``) together
            with the end of a step of it (with its steps as of that statement, if known).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
    """
    steps: dict[str, WorkflowStep] | None
    run: WorkflowRun | None
    if new_run is not None:
        run, owner, steps = new_run, new_run.lease_owner, {}
    elif leased is not None:
        run, steps = leased
        owner = run.lease_owner
    else:
        owner = store.new_lease_owner()
        # Only a running run can be leased: a finished run is never replayed.
        run = store.take_lease(run_id, owner, unless_in_flight=unless_in_flight)
        if run is None:
            return _not_leased(run_id, unless_in_flight)
        steps = None
    work = store.UnitOfWork(run.pk, owner)
    tracer = trace_hooks.current
    span = tracer.pass_span(run) if tracer is not None else None
    ended = "error"
    try:
        with keep_alive(lambda: store.renew_run_lease(run.pk, owner)):
            outcome = _replay(run, work, steps)
            ended = str(outcome.kind)
            return outcome
    except BaseException:
        work.release_lease()
        raise
    finally:
        try:
            work.flush()
        finally:
            if span is not None:
                span.end(ended)


def _not_leased(run_id: RunId, unless_in_flight: bool) -> PassOutcome:
    status, in_flight = store.status_and_flight(run_id)
    if status != RunStatus.RUNNING:
        return PassOutcome(RunStatus(status))
    return PassOutcome(PassEnd.IN_FLIGHT if unless_in_flight and in_flight else PassEnd.BUSY)


def _replay(run: WorkflowRun, work: store.UnitOfWork,
            steps: dict[str, WorkflowStep] | None) -> PassOutcome:
    definition = registry.find_workflow(run.workflow)
    if definition is None:
        # Not deployed in this process (a rolling deploy): wait for resume_run, as for a
        # missing step function.
        error: JSONObject = {"code": "RPC_NOT_FOUND",
                 "message": f"workflow '{run.workflow}' is not registered in this process"}
        return _finish(run, work, None, RunStatus.SUSPENDED, error=error)
    work.deadline_at = run.deadline_at
    if run.deadline_at is not None and clock().now() >= run.deadline_at:
        return _finish(run, work, None, RunStatus.FAILED, error=flow.deadline_error(
            run.pk, run.deadline_at, "at the start of a pass"))
    if steps is None:
        steps = store.load_steps(run.pk)
    wf = WorkflowContext(run=run, steps=steps, work=work)
    body: Callable[..., UserJSON] | None = definition.fn
    if definition.source == WorkflowSource.GRAPH:
        # A graph-sourced definition is a GraphDefinition (the registry cannot name it).
        graph = graph_for_run(run, cast(GraphDefinition, definition))
        if graph is None:
            return _finish(run, work, wf, RunStatus.FAILED, error={
                "code": "VERSION_NOT_FOUND",
                "message": f"run {run.pk} started on version {run.graph_hash} of graph "
                           f"workflow '{run.workflow}', which is not stored",
            })

        def graph_body(wf: WorkflowContext, data: UserJSON) -> UserJSON:
            return run_graph(wf, graph)

        body = graph_body
    else:
        wf.recorded = [key for key in wf.steps if asked_in_order(key)]
    assert body is not None  # a DSL definition always carries its function
    try:
        output = body(wf, run.input)
    except WorkflowPaused as signal:
        sent_after = work.release_lease()
        # A step this pass waited on may have ended while the pass unwound; its worker
        # saw the pass in flight and left the run to it. (Not one whose job only went
        # out after the release.)
        if wf.waiting_on and not wf.waiting_on <= sent_after and \
                store.left_to_this_pass(run.pk, wf.waiting_on):
            return PassOutcome(PassEnd.AGAIN)
        return PassOutcome(PassEnd.PAUSED, wake_at=signal.wake_at, workflow=run.workflow)
    except WorkflowSuspended as signal:
        outcome = _finish(run, work, wf, RunStatus.SUSPENDED, error=signal.error)
        if outcome.kind == RunStatus.SUSPENDED and signal.recheck is not None and \
                signal.recheck() and store.set_run_status(
                    run.pk, RunStatus.RUNNING, expected=(RunStatus.SUSPENDED,)):
            return PassOutcome(PassEnd.AGAIN)
        return outcome
    except WorkflowDeadlineExceeded as signal:
        return _finish(run, work, wf, RunStatus.FAILED, error=flow.deadline_error(
            run.pk, signal.deadline_at, "at a step start"))
    except WorkflowCancelled as signal:
        error = {"code": "WORKFLOW_CANCELLED",
                 "message": signal.reason or "Workflow cancelled"}
        return _finish(run, work, wf, RunStatus.CANCELLED, error=error)
    except store.PassAborted:
        work.flush()  # the steps that ran before the cancel did happen
        if not store.run_exists(run.pk):  # deleted, not cancelled
            store.drop_orphans(run.pk, (step.pk for step in wf.steps.values()))
            raise WorkflowRunNotFoundError(f"no workflow run has the id '{run.pk}'") from None
        return PassOutcome(PassEnd.ABORTED)
    except (WorkflowStepFailedError, GraphRunError) as exc:
        error = {"message": str(exc), "code": exc.code}  # a JSONObject (see above)
        if exc.step:
            error["step"] = exc.step
        return _finish(run, work, wf, RunStatus.FAILED, error=error)
    except (OperationalError, InterfaceError):
        # The database went away (a restart, a terminated backend): not the workflow's
        # failure. The run stays running; its lease lapses and recovery replays it.
        raise
    except Exception as exc:
        logger.warning("workflow %s run %s raised %r", run.workflow, run.pk, exc,
                       exc_info=not isinstance(exc, WorkflowError),
                       extra=log_extra(run.pk, workflow=run.workflow))
        return _finish(run, work, wf, RunStatus.FAILED, error=body_error(exc, _reached(wf)))
    try:
        output = normalize(output, what=f"the output of workflow '{run.workflow}'")
        output = validated_output(definition, output)
    except (NotSerializableError, InvalidOutputError) as exc:
        return _finish(run, work, wf, RunStatus.FAILED,
                       error={"message": str(exc), "code": "INVALID_OUTPUT"})
    return _finish(run, work, wf, RunStatus.COMPLETED, output=output)


class InvalidOutputError(ValueError):
    """The workflow's ``output_serializer`` refused its output; the message names the fields."""


def validated_output(definition: WorkflowLike, output: UserJSON) -> UserJSON:
    """The output as the run records it: the ``output_serializer``'s validated data.

    Raises:
        InvalidOutputError: The serializer refused the output (or raised).
        NotSerializableError: Its validated data is not JSON.
    """
    serializer_class = getattr(definition, "output_serializer", None)
    if serializer_class is None:
        return output
    what = f"the output of workflow '{definition.name}'"
    try:
        serializer = serializer_class(data=output)
        valid = serializer.is_valid()
    except Exception as exc:  # the serializer is the user's code
        raise InvalidOutputError(
            f"{what} could not be validated by {serializer_class.__name__}: "
            f"{exc.__class__.__name__}: {exc}") from None
    if not valid:
        raise InvalidOutputError(
            f"{what} is invalid ({serializer_class.__name__}): "
            f"{describe_errors(serializer.errors)}")
    return validated_json(serializer, what=f"the validated output of workflow "
                                           f"'{definition.name}'")


def graph_for_run(run: WorkflowRun, definition: GraphDefinition) -> GraphDefinition | None:
    """The graph a run follows: its own stored version if the code changed since."""
    if not run.graph_hash or run.graph_hash == definition.graph_hash:
        return definition
    stored = WorkflowVersion.objects.filter(
        workflow=run.workflow, graph_hash=run.graph_hash).values_list("graph", flat=True).first()
    if not stored or "definition" not in stored:
        return None
    return GraphDefinition.from_json(run.workflow, stored["definition"])


def _reached(wf: WorkflowContext) -> str | None:
    """The last step the body reached; else the last the run recorded (a graph's nodes, a
    pass before this one); None: the run has no step at all."""
    return wf.last_step or next(reversed(wf.steps), None)


def body_error(exc: BaseException, last_step: str | None = None) -> JSONObject:
    """How the run records an exception its body raised itself.

    Beside the ``message`` and ``code`` every surface shows, the staff-only details the
    API strips (``summary.public_error``): the exception's ``type``, the ``traceback`` of
    the user's code (the engine's own frames above the body left out), the ``line`` it
    reached and the step before it (``after_step``, null: the body failed before any
    step, so on its input).
    """
    code = exc.code if isinstance(exc, WorkflowError) else exc.__class__.__name__
    error: JSONObject = {"message": exception_message(exc) or exc.__class__.__name__,
                         "code": code}
    frames = traceback.extract_tb(exc.__traceback__)
    # The pass's own frames come first; the body's (and what it called) follow.
    while frames and frames[0].filename.startswith(PACKAGE_DIR):
        frames = traceback.StackSummary.from_list(frames[1:])
    user_frames = [f for f in frames if not f.filename.startswith(PACKAGE_DIR)]
    text = "".join(["Traceback (most recent call last):\n", *frames.format(),
                    *traceback.format_exception_only(exc)])
    error["type"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
    error["traceback"] = text[-MAX_TRACEBACK_CHARS:]
    if user_frames:
        where = user_frames[-1]
        error["line"] = f"{where.filename}:{where.lineno} in {where.name}"
    error["after_step"] = last_step
    return error


def _finish(run: WorkflowRun, work: store.UnitOfWork, wf: WorkflowContext | None,
            status: str, *, output: UserJSON = None, error: JSONObject | None = None
            ) -> PassOutcome:
    try:
        finished = work.finish_run(status, output=output, error=error,
                                   workflow=run.workflow, into=run)
    except WorkflowRunNotFoundError:
        # Deleted under the pass (by a step of its own): what the pass wrote goes too.
        if wf is not None:
            store.drop_orphans(run.pk, (step.pk for step in wf.steps.values()))
        raise
    if finished:
        logger.info("run %s of %s is %s", run.pk, run.workflow, status,
                    extra=log_extra(run.pk, workflow=run.workflow))
        # Only a run with a child-run step can have children to end (no query otherwise).
        children = wf is None or any(
            step.child_run_id is not None for step in wf.steps.values())
        lifecycle.after_status_change(run, status, children=children)
        return PassOutcome(RunStatus(status))
    # The run changed under us (cancelled from outside): its recorded status stands.
    work.release_lease()
    return PassOutcome(PassEnd.ABORTED)


def drive_queued(run_id: RunId, *, unless_in_flight: bool = False,
                 retry_busy: bool = True, leased: store.LeasedRun | None = None
                 ) -> PassOutcome:
    """Run passes on a worker; schedule wake-ups instead of waiting for them.

    ``unless_in_flight`` leaves the run alone while other queued steps of it are out;
    without ``retry_busy``, a run another pass holds is left to that pass; ``leased``,
    the run this process already leased (for the first pass).
    """
    executor = get_executor(False)
    while True:
        outcome = run_pass(run_id, unless_in_flight=unless_in_flight, leased=leased)
        leased = None
        if outcome.kind == PassEnd.AGAIN:
            unless_in_flight = False
            continue
        if outcome.kind == PassEnd.BUSY and retry_busy:
            executor.retry_busy(run_id)
        elif outcome.kind == PassEnd.PAUSED and outcome.wake_at is not None and \
                not executor.schedule_wakeup(run_id, "", outcome.wake_at,
                                             workflow=outcome.workflow):
            # The executor declined the wake-up: this worker waits for it in place.
            clock().sleep_until(outcome.wake_at)
            continue
        return outcome


def drive_inline(run_id: RunId, *, deadline: datetime | None = None,
                 new_run: WorkflowRun | None = None) -> PassOutcome:
    """Run passes in this process until the run settles, sleeping through waits.

    ``new_run``: the run row, just created leased by this process.

    Raises:
        TimeoutError: ``deadline`` passed while the run was waiting.
    """
    while True:
        outcome = run_pass(run_id, new_run=new_run)
        new_run = None
        if outcome.kind == PassEnd.AGAIN:
            continue
        if outcome.kind == PassEnd.BUSY:
            # Another process holds the lease: it drives the run; leave it alone.
            return outcome
        if outcome.kind != PassEnd.PAUSED:
            return outcome
        if outcome.wake_at is None:
            return outcome
        if deadline is not None and outcome.wake_at > deadline:
            clock().sleep_until(deadline)
            raise TimeoutError(f"run {run_id} is still waiting at its deadline")
        clock().sleep_until(outcome.wake_at)
