"""Dry replay: a recorded run's steps through the current code, calling nothing, writing nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from ..declarations import check_name, check_step_options
from ..dsl.context import WorkflowContext, check_patch_id, check_state_key, wait_timeout
from ..durations import parse_duration
from ..engine import approvals
from ..engine.steps import is_exhausted
from ..engine.store import UnitOfWork
from ..exceptions import (
    WorkflowCancelled,
    WorkflowDefinitionError,
    WorkflowPaused,
    WorkflowSignal,
    WorkflowStepFailedError,
    WorkflowSuspended,
)
from ..graph.definition import GraphDefinition
from ..graph.runner import run_graph
from ..models import WorkflowRun, WorkflowStep
from ..registry import registry
from ..status import StepStatus, SuspensionCode, WorkflowSource
from ..step_keys import (
    PATCH_PREFIX,
    SUSPEND_PREFIX,
    asked_in_order,
    public_step_name,
    step_key,
)
from .orchestrator import graph_for_run

#: What ``input`` is when the run's own input is replayed.
UNSET: Any = object()


class DivergenceCode(StrEnum):
    """Why a replay diverged (``Divergence.code``)."""

    #: The code asked for a step other than the one the run recorded at that point.
    STEP_MISMATCH = "STEP_MISMATCH"
    #: The code ended (returned, raised, or reached ``until``) before asking for a step
    #: the run recorded.
    NOT_REACHED = "NOT_REACHED"
    #: No workflow of the run's name is registered in this process.
    WORKFLOW_NOT_FOUND = "WORKFLOW_NOT_FOUND"
    #: A graph run replayed as resumed started on a version that is not stored.
    VERSION_NOT_FOUND = "VERSION_NOT_FOUND"


@dataclass(frozen=True)
class Divergence:
    """Where the current code stops replaying a recorded run.

    Attributes:
        run_id: The run's public id.
        step_recorded: The step (its public name) the run recorded at that point; None
            when the run recorded none there.
        step_asked: The step (its public name) the current code asked for there; empty
            when it asked for none (it ended first, or the workflow is gone).
        message: One human sentence saying what diverged.
        code: Which kind of divergence (a ``DivergenceCode`` value).
    """

    run_id: str
    step_recorded: str | None
    step_asked: str
    message: str
    code: str = DivergenceCode.STEP_MISMATCH


@dataclass(frozen=True)
class ReplayOutcome:
    """A dry replay's full answer (``first_divergence`` returns its ``divergence``).

    Attributes:
        divergence: The first divergence, or None when the run replays.
        patches_skipped: The patches the replay took the old path of (``wf.patched``
            answered False: the run recorded past them without them).
        patches_taken: The patches the replay took the new path of.
    """

    divergence: Divergence | None
    patches_skipped: frozenset[str] = frozenset()
    patches_taken: frozenset[str] = frozenset()


class _Stop(WorkflowSignal):
    """The replay has gone as far as the run's history goes: it replays."""


class _Diverged(WorkflowSignal):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


class DryReplayWriteError(RuntimeError):
    """A dry replay reached a write: a bug in the dry replay, never the user's."""


class _NeverWrites(UnitOfWork):
    """A unit of work that refuses every write (a dry replay holds no lease)."""

    def __init__(self, run: WorkflowRun) -> None:
        super().__init__(run.pk, "")

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise DryReplayWriteError(f"a dry replay of run {self.run_id} tried to write")

    defer_outcome = defer_new_step = writing = begin_attempt = ensure_step = _refuse
    save_new_step = release_lease = finish_run = _refuse

    def flush(self) -> None:
        """Nothing is ever held back: nothing to write."""

    @contextmanager
    def collecting_inserts(self) -> Iterator[None]:
        """No step row is ever inserted: the block only runs."""
        yield


def _no_refresh(*args: Any, **kwargs: Any) -> None:
    """A recorded row's fields are the history: never re-read (nor an unsaved one)."""


def _unrefreshable(step: WorkflowStep) -> WorkflowStep:
    row = copy.copy(step)
    # The graph runner re-reads a keyed node's branch after firing it; the copy keeps
    # the recorded one, and exported rows (unsaved) have nothing to re-read.
    setattr(row, "refresh_from_db", _no_refresh)  # noqa: B010
    return row


def _public(key: str | None) -> str | None:
    return None if key is None else public_step_name(key)


@dataclass
class _DryContext(WorkflowContext):
    """The ``wf`` of a dry replay: every primitive answers from the run's records."""

    until: str | None = None
    state_overlay: dict[str, Any] = field(default_factory=dict)
    patches_skipped: set[str] = field(default_factory=set)
    patches_taken: set[str] = field(default_factory=set)

    def _diverge(self, recorded: str | None, asked: str, message: str,
                 code: DivergenceCode = DivergenceCode.STEP_MISMATCH) -> _Diverged:
        return _Diverged(Divergence(run_id=str(self.run.pk), step_recorded=_public(recorded),
                                    step_asked=public_step_name(asked), message=message,
                                    code=code))

    def _mismatch(self, recorded: str | None, asked: str) -> _Diverged:
        where = (f"where the run recorded '{public_step_name(recorded)}'" if recorded
                 else "where the run recorded no step")
        return self._diverge(recorded, asked, (
            f"run {self.run.pk} of '{self.run.workflow}': the current code asks for step "
            f"'{public_step_name(asked)}' {where}"))

    def _check_replay(self, key: str) -> None:
        assert self.recorded is not None
        expected = self.recorded[self._replayed]
        if key != expected:
            raise self._mismatch(expected, key)
        self._replayed += 1
        if key == self.until:
            raise _Stop(key)

    def _mint_key(self, name: Any, *, prefix: str = "") -> str:
        before = self._replayed
        key = super()._mint_key(name, prefix=prefix)
        if self._replayed > before:
            return key
        # Past the history: a live run would run this step now.
        if self.until is not None and key != self.until:
            raise self._mismatch(self.until, key)
        raise _Stop(key)

    @property
    def replayed_all(self) -> bool:
        return self.recorded is None or self._replayed >= len(self.recorded)

    @contextmanager
    def fanning_out(self) -> Iterator[None]:
        self.fan_out += 1
        try:
            yield
        finally:
            self.fan_out -= 1

    def _recorded_outcome(self, key: str) -> Any:
        """The recorded step's result; its failure re-raised; its wait a pause."""
        step = self.steps[key]
        if step.status == StepStatus.SUCCEEDED:
            return step.result
        if is_exhausted(step):
            error = step.error or {}
            raise WorkflowStepFailedError(key, error.get("message", ""),
                                          error_type=error.get("type"))
        raise WorkflowPaused(key, wake_at=step.wake_at)

    def _dispatch(self, key: str, fn_or_name: str | Callable[..., Any], data: Any, *,
                  retries: int | None = None, retry_delay: float | str | None = None,
                  on_error: str | Callable[..., Any] | None = None,
                  timeout: float | str | None = None, from_step_name: str | None = None
                  ) -> Any:
        if retries is not None or retry_delay is not None:
            check_step_options(f"step '{key}'", retries=retries, retry_delay=retry_delay)
        if on_error is not None:
            self._function_name(on_error, key)
        # A compensation (``<key>:onError``) recorded after a failure is not asked again:
        # its result never reaches the body.
        return self._recorded_outcome(key)

    def sleep(self, step_name: str, duration: float | str) -> None:
        try:
            parse_duration(duration, what=f"duration of sleep '{step_name}'")
        except ValueError as exc:
            raise WorkflowDefinitionError(str(exc)) from exc
        self._last_step = key = self._mint_key(step_name)
        self._recorded_outcome(key)

    def suspend(self, reason: str, *, timeout: float | str | None = None) -> Any:
        wait_timeout(timeout, f"suspend {reason!r}")
        self._last_step = key = self._mint_key(reason, prefix=SUSPEND_PREFIX)
        step = self.steps[key]
        if step.status == StepStatus.SUCCEEDED:
            return step.result
        raise WorkflowSuspended({"code": SuspensionCode.WORKFLOW_SUSPENDED.value,
                                 "message": reason, "step": key})

    def wait_for_event(self, step_name: str, event: str, *, key: str | None = None,
                       timeout: float | str | None = None) -> Any:
        what = f"wait_for_event {step_name!r}"
        check_name(event, f"{what}: the event", error=WorkflowDefinitionError)
        check_name(key, f"{what}: the key", optional=True,
                          error=WorkflowDefinitionError)
        wait_timeout(timeout, what)
        return self._recorded_wait(step_name, SuspensionCode.WAITING_FOR_EVENT)

    def recv(self, step_name: str, topic: str = "default", *,
             timeout: float | str | None = None) -> Any:
        what = f"recv {step_name!r}"
        check_name(topic, f"{what}: the topic", error=WorkflowDefinitionError)
        wait_timeout(timeout, what)
        return self._recorded_wait(step_name, SuspensionCode.WAITING_FOR_MESSAGE)

    def wait_for_event_at(self, step_key: str, event: str, *, key: str | None,
                          timeout: float | None, from_step_name: str | None = None) -> Any:
        step = self.steps[step_key]
        if step.status == StepStatus.SUCCEEDED:
            return step.result
        raise WorkflowSuspended({"code": SuspensionCode.WAITING_FOR_EVENT.value,
                                 "message": f"waiting at '{step_key}'", "step": step_key})

    def _recorded_wait(self, step_name: str, code: SuspensionCode) -> Any:
        self._last_step = key = self._mint_key(step_name)
        step = self.steps[key]
        if step.status == StepStatus.SUCCEEDED:
            return step.result
        raise WorkflowSuspended({"code": code.value, "message": f"waiting at '{key}'",
                                 "step": key})

    def approval(self, reason: str, *, serializer: type | None = None,
                 expiry: float | str | None = None, approvers: str = "any",
                 approver_permission: str | None = None) -> dict[str, Any]:
        if approvers not in approvals.APPROVER_POLICIES:
            raise WorkflowDefinitionError(
                f"approval '{reason}': approvers must be one of "
                f"{', '.join(approvals.APPROVER_POLICIES)}, not {approvers!r}")
        if expiry is not None:
            try:
                parse_duration(expiry, what="expiry")
            except ValueError as exc:
                raise WorkflowDefinitionError(f"approval '{reason}': {exc}") from exc
        self._last_step = key = self._mint_key(reason, prefix=approvals.GATE_PREFIX)
        step = self.steps[key]
        if step.status == StepStatus.SUCCEEDED:
            return dict(step.result or {})
        raise WorkflowSuspended({"code": SuspensionCode.WAITING_FOR_APPROVAL.value,
                                 "message": reason, "step": key})

    def patched(self, patch_id: str) -> bool:
        check_patch_id(patch_id)
        key = PATCH_PREFIX + patch_id
        if key in self.steps or self.replayed_all:
            # Recorded with the patch, or reached for the first time: the new path (a
            # live pass would record the marker here).
            self.patches_taken.add(patch_id)
            return True
        self.patches_skipped.add(patch_id)
        return False

    def get_run(self) -> WorkflowRun:
        return self.run

    def get_state(self) -> dict[str, Any]:
        return {**(self.run.state or {}), **self.state_overlay}

    def set_state(self, name: str, value: Any) -> None:
        check_state_key(name)
        self.state_overlay[name] = value


@dataclass
class _DryGraphContext(_DryContext):
    """The ``wf`` a graph's runner drives in a dry replay: it starts with no steps and
    each node instance it fires takes its recorded row (or waits, when none is)."""

    history: dict[str, WorkflowStep] = field(default_factory=dict)
    fired: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)
    until_reached: bool = False

    def _waiting(self, key: str) -> WorkflowPaused:
        self.steps[key] = _unrefreshable(WorkflowStep(
            run_id=self.run.pk, step_name=key, status=StepStatus.SCHEDULED))
        return WorkflowPaused(key)

    def wait_for_event_at(self, step_key: str, event: str, *, key: str | None,
                          timeout: float | None, from_step_name: str | None = None) -> Any:
        if step_key == self.until:
            self.until_reached = True
            raise self._waiting(step_key)
        recorded = self.history.get(step_key)
        if recorded is None:
            self.asked.append(step_key)
            raise self._waiting(step_key)
        self.fired.add(step_key)
        self.steps[step_key] = _unrefreshable(recorded)
        return super().wait_for_event_at(step_key, event, key=key, timeout=timeout,
                                         from_step_name=from_step_name)

    def run_named_step(self, key: str, fn_or_name: str | Callable[..., Any], data: Any,
                       **options: Any) -> Any:
        if key == self.until:
            self.until_reached = True
            raise self._waiting(key)
        recorded = self.history.get(key)
        if recorded is None:
            self.asked.append(key)
            raise self._waiting(key)
        self.fired.add(key)
        self.steps[key] = _unrefreshable(recorded)
        return self._recorded_outcome(key)


def _history(run: WorkflowRun, steps: Iterable[WorkflowStep] | Mapping[str, WorkflowStep] | None
             ) -> dict[str, WorkflowStep]:
    if steps is None:
        rows = list(WorkflowStep.objects.filter(run__pk=run.pk).order_by("id"))
    else:
        rows = list(steps.values() if isinstance(steps, Mapping) else steps)
        if all(row.pk is not None for row in rows):
            rows.sort(key=lambda row: row.pk)
    return {row.step_name: row for row in rows}


def first_divergence(run: WorkflowRun, *,
                     steps: Iterable[WorkflowStep] | Mapping[str, WorkflowStep] | None = None,
                     input: Any = UNSET, until: str | None = None,
                     as_resumed: bool = False) -> Divergence | None:
    """Replay a recorded run through the current code of its workflow, dry.

    No step function, compensation, child run or gate is called, and nothing is written
    (a graph run's stored version may be read): every primitive answers from the run's
    records. DSL runs must ask for their recorded steps in the recorded order; graph
    runs must fire every recorded node instance.

    Args:
        run: The run (a saved row, or an unsaved one read from an export).
        steps: The recorded steps to treat as the run's history, in the order the run
            recorded them (rows with ids are sorted by id); default: all of the run's.
        input: Replay with this input instead of the run's.
        until: A step (its key, or its public name: ``approval:<reason>``): the replay
            ends, replaying, as soon as the code asks for it,
            provided every step of ``steps`` was asked before (a fork's prefix check).
            Without it, the replay ends, replaying, when the code asks for a step past
            the history (the run was live, waiting or finished there).
        as_resumed: Replay a graph run on the graph a pass would resume it on (its
            stored version when it started on an older one) instead of the current one.

    Returns:
        None when the run replays; else the first divergence.
    """
    return replay(run, steps=steps, input=input, until=until, as_resumed=as_resumed).divergence


def replay(run: WorkflowRun, *,
           steps: Iterable[WorkflowStep] | Mapping[str, WorkflowStep] | None = None,
           input: Any = UNSET, until: str | None = None,
           as_resumed: bool = False) -> ReplayOutcome:
    """``first_divergence`` with what else the replay saw (the patches it took or not).

    Args:
        run: See ``first_divergence``.
        steps: See ``first_divergence``.
        input: See ``first_divergence``.
        until: See ``first_divergence``.
        as_resumed: See ``first_divergence``.

    Returns:
        The replay's outcome.
    """
    history = _history(run, steps)
    if until is not None:
        until = step_key(until)
    definition = registry.find_workflow(run.workflow)
    run_id = str(run.pk)
    if definition is None:
        first = next(iter(history), None)
        return ReplayOutcome(Divergence(
            run_id=run_id, step_recorded=_public(first), step_asked="",
            code=DivergenceCode.WORKFLOW_NOT_FOUND,
            message=f"run {run_id}: workflow '{run.workflow}' is not registered in this "
                    "process (removed or renamed)"))
    replayed_run = copy.copy(run)
    if input is not UNSET:
        replayed_run.input = input
    if definition.source == WorkflowSource.GRAPH:
        graph = cast(GraphDefinition, definition)
        if as_resumed:
            found = graph_for_run(run, graph)
            if found is None:
                return ReplayOutcome(Divergence(
                    run_id=run_id, step_recorded=_public(next(iter(history), None)),
                    step_asked="", code=DivergenceCode.VERSION_NOT_FOUND,
                    message=f"run {run_id} started on version {run.graph_hash} of graph "
                            f"workflow '{run.workflow}', which is not stored"))
            graph = found
        return _replay_graph(replayed_run, graph, history, until)
    return _replay_dsl(replayed_run, definition.fn, history, until)


def _ending(exc: BaseException | None) -> str:
    if exc is None:
        return "returns"
    if isinstance(exc, WorkflowCancelled):
        return "cancels the run"
    return f"raises {exc.__class__.__name__}: {exc}"


def _replay_dsl(run: WorkflowRun, body: Callable[..., Any] | None,
                history: dict[str, WorkflowStep], until: str | None) -> ReplayOutcome:
    assert body is not None  # a DSL definition always carries its function
    wf = _DryContext(
        run=run, steps=history, work=_NeverWrites(run), until=until,
        recorded=[key for key in history if asked_in_order(key)])
    try:
        body(wf, run.input)
    except _Stop:
        divergence = None
    except _Diverged as diverged:
        divergence = diverged.divergence
    except (WorkflowPaused, WorkflowSuspended):
        divergence = None  # the run waits there: it replays as far as it went
    except DryReplayWriteError:
        raise  # the dry replay's own bug: never taken for the body's error
    except (Exception, WorkflowCancelled) as exc:
        divergence = _unreached(wf, exc)
    else:
        divergence = _unreached(wf, None)
    return ReplayOutcome(divergence, frozenset(wf.patches_skipped), frozenset(wf.patches_taken))


def _unreached(wf: _DryContext, ended: BaseException | None) -> Divergence | None:
    """After the body ended: the recorded step (or ``until``) it never asked for."""
    assert wf.recorded is not None
    if wf._replayed < len(wf.recorded):
        missing: str | None = wf.recorded[wf._replayed]
    elif wf.until is not None:
        missing = wf.until
    else:
        return None
    assert missing is not None
    return Divergence(
        run_id=str(wf.run.pk), step_recorded=public_step_name(missing), step_asked="",
        code=DivergenceCode.NOT_REACHED,
        message=f"run {wf.run.pk} of '{wf.run.workflow}': the current code "
                f"{_ending(ended)} without asking for step '{public_step_name(missing)}', "
                "which the run recorded")


def _replay_graph(run: WorkflowRun, graph: GraphDefinition, history: dict[str, WorkflowStep],
                  until: str | None) -> ReplayOutcome:
    wf = _DryGraphContext(run=run, steps={}, work=_NeverWrites(run), until=until,
                          history=history)
    ended: BaseException | None = None
    try:
        run_graph(wf, graph)
    except WorkflowPaused:
        pass
    except DryReplayWriteError:
        raise
    except (Exception, WorkflowCancelled) as exc:
        ended = exc
    unreached = [key for key in history if key not in wf.fired and key != until]
    if not unreached:
        if until is not None and not wf.until_reached:
            return ReplayOutcome(Divergence(
                run_id=str(run.pk), step_recorded=public_step_name(until), step_asked="",
                code=DivergenceCode.NOT_REACHED,
                message=f"run {run.pk} of graph '{run.workflow}': the current graph "
                        f"never fires node '{until}'"))
        return ReplayOutcome(None)
    missing = unreached[0]
    asked = wf.asked[0] if wf.asked else ""
    instead = (f"fires '{asked}' instead" if asked
               else ("ends" if ended is None else f"ends ({_ending(ended)})"))
    return ReplayOutcome(Divergence(
        run_id=str(run.pk), step_recorded=missing, step_asked=asked,
        code=DivergenceCode.STEP_MISMATCH if asked else DivergenceCode.NOT_REACHED,
        message=f"run {run.pk} of graph '{run.workflow}': the current graph never fires "
                f"node instance '{missing}', which the run recorded; it {instead}"))


__all__ = ["UNSET", "Divergence", "DivergenceCode", "DryReplayWriteError", "ReplayOutcome",
           "first_divergence", "replay"]
