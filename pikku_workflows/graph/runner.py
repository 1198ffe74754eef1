"""Running a graph workflow's pass: plan, fire, repeat until nothing more can fire."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..engine.clock import clock
from ..engine.steps import is_exhausted
from ..exceptions import (
    WorkflowError,
    WorkflowPaused,
    WorkflowStepFailedError,
    WorkflowSuspended,
)
from ..status import StepStatus
from .definition import GraphDefinition
from .planner import Firing, Instance, Planner, item_index, logical
from .values import TRIGGER, dig, resolve

if TYPE_CHECKING:
    from ..dsl.context import WorkflowContext

# Cycles are bounded by the branches that leave them; this catches the ones that are not.
MAX_INSTANCES = 10_000


class GraphRunError(WorkflowError):
    """A graph run cannot go on: a node failed, or nothing can ever fire again."""

    def __init__(self, code: str, message: str, *, step: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.step = step


def run_graph(wf: WorkflowContext, graph: GraphDefinition) -> Any:
    """Drive the graph as far as this pass can; return the run's output when it is done.

    Raises:
        WorkflowPaused: Nodes are in flight (queued, retry delay, child run).
        GraphRunError: ``GRAPH_NODE_FAILED``, ``GRAPH_DEADLOCK``, ``GRAPH_INSTANCE_LIMIT``.
    """
    start_node = (wf.run.wire or {}).get("start_node")
    entry = [start_node] if start_node else list(graph.entry)
    trigger = wf.run.input
    _resume_unfinished(wf, graph)
    state = _RunState(graph, entry)
    for step in list(wf.steps.values()):
        state.observe(step)
    # Each wave costs what it changed: the state is kept up to date, never rebuilt.
    while True:
        if len(state.steps) > MAX_INSTANCES:
            raise GraphRunError(
                "GRAPH_INSTANCE_LIMIT",
                f"graph run reached {len(state.steps)} node instances; the limit is "
                f"{MAX_INSTANCES} (a cycle that does not leave, or a fan-out too wide)")
        failed = state.failed()
        planned = None
        if failed:
            firings = _error_firings(graph, state.steps, failed)
        else:
            planned = state.planner.plan(_widths(graph, state.results, trigger))
            firings = planned.to_fire
        if not firings:
            _settle(graph, state.steps, failed, planned.blocked if planned else None,
                    wf.suspensions)
            return _output(graph, state.results)
        before = {f.key: _signature(wf.steps.get(f.key)) for f in firings}
        _fire_wave(wf, graph, firings, state.results, trigger, state.steps)
        changed = [wf.steps[key] for key, seen in before.items()
                   if key in wf.steps and _signature(wf.steps[key]) != seen]
        if not changed:
            # A wave that changed nothing would be planned again forever (at 100 % CPU,
            # with a renewed lease that keeps recovery away): end the run instead.
            raise GraphRunError(
                "GRAPH_DEADLOCK",
                "graph run made no progress: firing "
                + ", ".join(sorted(f.key for f in firings)) + " changed no step")
        for step in changed:
            state.observe(step)


class _RunState:
    """What the waves of one pass know, updated from the step rows they change."""

    def __init__(self, graph: GraphDefinition, entry: list[str]) -> None:
        self.graph = graph
        self.planner = Planner(graph, entry)
        self.steps: dict[str, Any] = {}  # the graph's step rows, in creation order
        self.results: dict[str, Any] = {}
        self._items: dict[str, dict[int, Any]] = {}
        self._latest: dict[str, int] = {}  # node -> order of the visit whose result counts
        self._order: dict[str, int] = {}
        self._failed: dict[str, Any] = {}

    def observe(self, step: Any) -> None:
        key = step.step_name
        node = logical(key)
        if node not in self.graph.nodes:
            return
        self.steps[key] = step
        order = self._order.setdefault(key, len(self._order))
        self.planner.observe(Instance(key, step.status, step.from_step_name, step.branch_taken))
        if _exhausted(step):
            self._failed[key] = step
        else:
            self._failed.pop(key, None)
        if step.status != StepStatus.SUCCEEDED:
            return
        index = item_index(key)
        if self.graph.nodes[node].for_each is not None and index is not None:
            items = self._items.setdefault(node, {})
            items[index] = step.result
            self.results[node] = [items[i] for i in sorted(items)]
        elif order >= self._latest.get(node, -1):
            self._latest[node] = order  # the latest visit's result wins
            self.results[node] = step.result

    def failed(self) -> list[Any]:
        """The exhausted steps, in creation order."""
        return sorted(self._failed.values(), key=lambda s: self._order[s.step_name])


def _signature(step: Any) -> tuple[str, int, str | None] | None:
    """What a wave can change in a step: its status, attempts and branch."""
    return None if step is None else (step.status, step.attempt_count, step.branch_taken)


def _resume_unfinished(wf: WorkflowContext, graph: GraphDefinition) -> None:
    """Carry on the instances an earlier pass started: due retries, child runs that
    ended, queued steps never dispatched, waits for an event. (Queued steps in flight
    just keep waiting.)"""
    for key, step in list(wf.steps.items()):
        node = graph.nodes.get(logical(key))
        if node is None or step.status == StepStatus.SUCCEEDED or _exhausted(step):
            continue
        if node.wait is not None:
            data = step.data or {}
            with contextlib.suppress(WorkflowPaused):
                _wait(wf, key, data.get("event", node.wait["event"]), data.get("key"),
                      data.get("timeout"), step.from_step_name)
            continue
        # A failure is seen by the plan below, a wait by the settling at the end.
        with contextlib.suppress(WorkflowStepFailedError, WorkflowPaused):
            wf.run_named_step(key, step.rpc_name or node.rpc_name, step.data,
                              retries=node.retries, retry_delay=node.retry_delay,
                              from_step_name=step.from_step_name)


def _widths(graph: GraphDefinition, results: dict[str, Any], trigger: Any
            ) -> dict[str, int | None]:
    """Each fan-out's width once its source is known; an empty one's result is ``[]``."""
    widths: dict[str, int | None] = {}
    changed = True
    while changed:  # an empty fan-out can feed another one
        changed = False
        for nid, node in graph.nodes.items():
            if node.for_each is None or widths.get(nid) is not None:
                continue
            widths[nid] = _width(graph, nid, results, trigger)
            if widths[nid] == 0 and nid not in results:
                results[nid] = []
                changed = True
    return widths


def _fire_wave(wf: WorkflowContext, graph: GraphDefinition, firings: list[Firing],
               results: dict[str, Any], trigger: Any, steps: dict[str, Any]) -> None:
    with contextlib.ExitStack() as fanning:
        if len(firings) > 1:
            fanning.enter_context(wf.fanning_out())
        pause = _fire_all(wf, graph, firings, results, trigger, steps)
    finished = any(_settled(wf.steps[f.key]) for f in firings if f.key in wf.steps)
    if pause is not None and not finished:
        raise pause  # nothing of this wave is done yet: plan again when something is


def _fire_all(wf: WorkflowContext, graph: GraphDefinition, firings: list[Firing],
              results: dict[str, Any], trigger: Any, steps: dict[str, Any]
              ) -> WorkflowPaused | None:
    """Fire each instance of a wave; the earliest pause among them, if any."""
    pause: WorkflowPaused | None = None
    for firing in firings:
        node = graph.nodes[firing.node]
        if firing.error_of is not None:
            data = _error_input(steps[firing.error_of])
        else:
            data = _input(graph, firing, results, trigger)
        try:
            if node.wait is not None:
                key = _wait_key(node.wait.get("key"), results, trigger, firing.key)
                _wait(wf, firing.key, node.wait["event"], key, node.wait.get("timeout"),
                      firing.from_step)
                continue
            wf.run_named_step(firing.key, node.rpc_name, data, retries=node.retries,
                              retry_delay=node.retry_delay, from_step_name=firing.from_step)
            if node.keyed:
                # ctx.branch() wrote the row; this pass's planner reads the object.
                wf.steps[firing.key].refresh_from_db(fields=["branch_taken"])
        except WorkflowStepFailedError:
            pass  # recorded on the step; the next plan sees it exhausted
        except WorkflowPaused as signal:
            if pause is None or (signal.wake_at is not None and (
                    pause.wake_at is None or signal.wake_at < pause.wake_at)):
                pause = signal
    return pause


def _wait(wf: WorkflowContext, key: str, event: str, event_key: str | None,
          timeout: float | None, from_step: str | None) -> None:
    """Fire a ``wait_for_event`` node's instance; an open wait is kept for the settling."""
    try:
        wf.wait_for_event_at(key, event, key=event_key, timeout=timeout,
                             from_step_name=from_step)
        wf.suspensions.pop(key, None)
    except WorkflowSuspended as signal:
        wf.suspensions[key] = signal


def _wait_key(spec: Any, results: dict[str, Any], trigger: Any, key: str) -> str | None:
    """A wait node's event key: its literal, or what its ref points to (a number is
    taken as its text)."""
    value = resolve(spec, results, trigger)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise GraphRunError(
        "GRAPH_NODE_FAILED",
        f"graph node '{key}': the key of its wait_for_event resolved to "
        f"{type(value).__name__} {value!r}; a key is a string, a number or None", step=key)


def _error_input(step: Any) -> dict[str, Any]:
    error = {k: v for k, v in (step.error or {}).items() if k in ("message", "type")}
    return {"error": error, "input": step.data}


def _exhausted(step: Any) -> bool:
    return is_exhausted(step)


def _settled(step: Any) -> bool:
    """Succeeded, or failed for good; a failed step with attempts left still waits."""
    return step.status == StepStatus.SUCCEEDED or (
        step.status == StepStatus.FAILED and _exhausted(step))


def _error_firings(graph: GraphDefinition, steps: dict[str, Any],
                   failed: list[Any]) -> list[Firing]:
    """The ``on_error`` nodes of failed nodes that have not fired for them yet."""
    firings = []
    for step in failed:
        for target in graph.nodes[logical(step.step_name)].on_error:
            if any(s.from_step_name == step.step_name and logical(k) == target
                   for k, s in steps.items()):
                continue
            visits = sum(1 for k in steps if logical(k) == target)
            key = target if visits == 0 else f"{target}#{visits}"
            firings.append(Firing(target, key, step.step_name, error_of=step.step_name))
    return firings


def _settle(graph: GraphDefinition, steps: dict[str, Any], failed: list[Any],
            blocked: dict[str, list[str]] | None,
            suspensions: dict[str, WorkflowSuspended] | None = None) -> None:
    """Nothing fires: wait for what is in flight, else fail or deadlock, else done."""
    waiting = [s for s in steps.values() if not _settled(s)]
    if waiting and suspensions and all(s.step_name in suspensions for s in waiting):
        if not failed:
            # Only waits for events are left: the run suspends (it holds no worker).
            raise suspensions[waiting[0].step_name]
        waiting = []  # a node failed for good: no event could save the run
    if waiting:
        earliest = min((s.wake_at for s in waiting if s.wake_at), default=None)
        raise WorkflowPaused(waiting[0].step_name, wake_at=_future(earliest))
    if failed:
        first = failed[0]
        message = (first.error or {}).get("message", "")
        raise GraphRunError(
            "GRAPH_NODE_FAILED",
            f"graph node '{first.step_name}' failed after exhausting its retries: {message}",
            step=first.step_name)
    if blocked:
        waits = "; ".join(f"'{node}' waits for {', '.join(repr(n) for n in on)}"
                          for node, on in sorted(blocked.items()))
        raise GraphRunError(
            "GRAPH_DEADLOCK",
            f"graph run can no longer progress: {waits}, which will never run",
            step=sorted(blocked)[0])


def _future(moment: datetime | None) -> datetime | None:
    return moment if moment is not None and moment > clock().now() else None


def _width(graph: GraphDefinition, nid: str, results: dict[str, Any], trigger: Any
           ) -> int | None:
    source = graph.nodes[nid].for_each or {}
    if source["$ref"] == TRIGGER:
        value = dig(trigger, source.get("path"))
    elif source["$ref"] in results:
        value = dig(results[source["$ref"]], source.get("path"))
    else:
        return None
    if not isinstance(value, list):
        raise GraphRunError(
            "GRAPH_NODE_FAILED",
            f"for_each of node '{nid}': source {source['$ref']!r}"
            f"{'.' + source['path'] if source.get('path') else ''} resolved to "
            f"{type(value).__name__}, expected a list", step=nid)
    return len(value)


def _input(graph: GraphDefinition, firing: Firing, results: dict[str, Any],
           trigger: Any) -> Any:
    node = graph.nodes[firing.node]
    item: Any = None
    if firing.item_index is not None and node.for_each is not None:
        source = node.for_each
        values = trigger if source["$ref"] == TRIGGER else results.get(source["$ref"])
        item = dig(values, source.get("path"))[firing.item_index]
    if node.input is None:
        if firing.item_index is not None:
            return item
        # An entry node without an input mapping gets the whole run input.
        return trigger if firing.node in graph.entry and firing.from_step is None else {}
    if firing.item_index is not None:
        return resolve(node.input, results, trigger, item)
    return resolve(node.input, results, trigger)


def _output(graph: GraphDefinition, results: dict[str, Any]) -> Any:
    """The ``output`` node's result, else a dict of every sink node's result (None when it
    did not run): the definition alone decides the shape, never the run's data."""
    if graph.output is not None:
        return results.get(graph.output)
    return {nid: results.get(nid) for nid in graph.sinks}
