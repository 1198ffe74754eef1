"""Planning a fork: which of a terminal run's steps a rerun from a step keeps, which it runs
again, and whether the current code still replays the kept ones (DESIGN 8.3)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from ..dsl.context import WorkflowContext
from ..engine import approvals, store
from ..engine.steps import is_exhausted
from ..exceptions import WorkflowForkError, WorkflowSignal
from ..graph.definition import GraphDefinition
from ..models import WorkflowRun, WorkflowStep
from ..registry import WorkflowLike, registry
from ..status import StepStatus, WorkflowSource
from ..step_keys import COMPENSATION_SUFFIX, public_step_name, step_key
from ..types import JSONObject, UserJSON
from .dry_replay import UNSET as REPLAY_UNSET
from .dry_replay import first_divergence

#: A graph step key's instance suffixes: ``node[2]`` (for_each), ``node#1`` (a cycle).
_INSTANCE = re.compile(r"(?:#\d+|\[\d+\])+$")
#: ``input`` not given: the source's.
UNSET: Any = REPLAY_UNSET


@dataclass(frozen=True)
class ForkPlan:
    """What a fork of ``source`` from ``cut`` keeps and reruns.

    Attributes:
        source: The terminal run forked.
        cut: The step key the fork reruns from (from the start: the first step the source
            recorded; ``""`` if it recorded none).
        kept: The keys of the source's steps the fork keeps, in the order it recorded them.
        rerun: The keys of the source's steps that run again (or not at all, if the code
            no longer reaches them), in the order it recorded them.
        asked: The step the caller asked to rerun from.
        graph: Whether the run is a graph workflow's.
        moved: Why ``cut`` is not ``asked``: ``"parallel"`` (the start of the
            ``wf.parallel`` call holding it), ``"unsettled"`` (an earlier step that never
            settled), ``"node"`` (the first instance of its graph node), or ``""``.
        kept_rows: The source's rows of ``kept`` (what the fork copies).
    """

    source: WorkflowRun
    cut: str
    kept: list[str]
    rerun: list[str]
    asked: str = ""
    graph: bool = False
    moved: str = ""
    kept_rows: list[WorkflowStep] = field(default_factory=list, repr=False, compare=False)

    def fork_state(self) -> JSONObject:
        """The fork's state: the source's, minus the approval decisions recorded for
        gates it does not keep (those gates ask again)."""
        kept_records = {approvals.record_key(key) for key in self.kept}
        prefix = approvals.record_key("")  # every gate's decision is kept under it
        return {name: value for name, value in (self.source.state or {}).items()
                if not name.startswith(prefix) or name in kept_records}


def _resolve_step(name: Any, steps: list[WorkflowStep], run: WorkflowRun) -> str:
    """The step key ``name`` names (a key, or its public name as the API shows it).

    Raises:
        WorkflowForkError: ``FORK_UNKNOWN_STEP``.
    """
    keys = [step.step_name for step in steps]
    if isinstance(name, str) and name:
        for candidate in (name, step_key(name)):
            if candidate in keys:
                return candidate
    shown = ", ".join(public_step_name(k) for k in keys[:20]) + (", ..." if len(keys) > 20
                                                                  else "")
    raise WorkflowForkError(
        f"run {run.pk} has no step {name!r} to rerun from"
        + (f" (its steps: {shown})" if keys else " (it recorded no step)"),
        code="FORK_UNKNOWN_STEP", run_id=run.pk)


def _settled(step: WorkflowStep) -> bool:
    """Whether a step's outcome is final: succeeded, or failed with no attempt left (a
    step still running, waiting or due to retry when its run ended is not)."""
    return step.status == StepStatus.SUCCEEDED or is_exhausted(step)


def _first_unsettled(steps: list[WorkflowStep]) -> str:
    """The first step that failed or never settled, compensations aside; "" if none."""
    return next((s.step_name for s in steps if s.status != StepStatus.SUCCEEDED
                 and not s.step_name.endswith(COMPENSATION_SUFFIX)), "")


def graph_node_of(key: str) -> str:
    """The graph node a step key is an instance of (``n[2]``, ``n#1`` -> ``n``)."""
    return _INSTANCE.sub("", key)


def _downstream(graph: GraphDefinition, node: str) -> set[str]:
    """``node``, the nodes its edges lead to (``next``, ``on_error``), and those that
    read one of them (``ref``), to a fixpoint."""
    rerun = {node}
    while True:
        grown = set(rerun)
        for nid in rerun:
            current = graph.nodes.get(nid)
            if current is not None:
                grown |= set(current.targets(every=True)) | set(current.on_error)
        grown |= {nid for nid, other in graph.nodes.items() if other.dependencies() & grown}
        if grown == rerun:
            return rerun
        rerun = grown


def plan_fork(run: WorkflowRun, from_step: str | None = None, *,
              input: UserJSON = UNSET) -> ForkPlan:
    """What a fork of ``run`` from ``from_step`` keeps and reruns; writes nothing.

    Args:
        run: A terminal run, or one suspended with ``VERSION_CONFLICT``.
        from_step: A step key or public name; None: the first failed step, else the start
            (for a ``VERSION_CONFLICT``: the step where today's code stops replaying it).
        input: The fork's input if it differs from the source's (the ``wf.parallel``
            grouping replays with it).

    Raises:
        WorkflowForkError: ``FORK_NOT_TERMINAL``, ``FORK_UNKNOWN_STEP``.
        WorkflowNotFoundError: The workflow is no longer registered.
    """
    if not run.is_forkable:
        raise WorkflowForkError(
            f"run {run.pk} is {run.status}: only a completed, failed or cancelled run, or "
            "one suspended with VERSION_CONFLICT, can be rerun from a step",
            code="FORK_NOT_TERMINAL", run_id=run.pk)
    definition = registry.workflow(run.workflow)
    steps = list(WorkflowStep.objects.filter(run=run).order_by("id"))
    if from_step is None:
        asked = _first_unsettled(steps)
        if run.has_version_conflict:
            # Where today's code stops replaying the run: what it reruns from.
            divergence = first_divergence(run)
            if divergence is not None and divergence.step_recorded:
                asked = _resolve_step(divergence.step_recorded, steps, run)
    else:
        asked = _resolve_step(from_step, steps, run)
        if asked.endswith(COMPENSATION_SUFFIX):
            # A compensation runs when its step fails: rerunning it means rerunning that.
            asked = _resolve_step(asked[:-len(COMPENSATION_SUFFIX)], steps, run)
    graph = definition.source == WorkflowSource.GRAPH
    moved = ""
    if not asked:
        kept_rows: list[WorkflowStep] = []
        cut = steps[0].step_name if steps else ""
    elif graph:
        assert isinstance(definition, GraphDefinition)
        node = graph_node_of(asked)
        rerun_nodes = _downstream(definition, node)
        # A node that never settled has no outcome to keep: it fires again.
        kept_rows = [s for s in steps
                     if graph_node_of(s.step_name) not in rerun_nodes and _settled(s)]
        # The node reruns whole: from its first instance (``n``, ``n[0]``).
        cut = next(s.step_name for s in steps if graph_node_of(s.step_name) == node)
    else:
        # Only settled steps are kept: the cut moves back to the first that is not.
        position = [s.step_name for s in steps].index(asked)
        cut = next((s.step_name for s in steps[:position] if not _settled(s)), asked)
        moved = "unsettled" if cut != asked else ""
        group = _parallel_start(run, definition, steps, cut, input)
        if group is not None and group != cut:
            cut, moved = group, "parallel"
        index = next(i for i, s in enumerate(steps) if s.step_name == cut)
        kept_rows = steps[:index]
    if graph and asked and cut != asked:
        moved = "node"
    kept = [s.step_name for s in kept_rows]
    kept_set = set(kept)
    return ForkPlan(source=run, cut=cut, asked=asked or cut, graph=graph, moved=moved,
                    kept=kept, rerun=[s.step_name for s in steps if s.step_name not in kept_set],
                    kept_rows=kept_rows)


class _Reached(BaseException):
    """The probe reached the cut (a BaseException: a body's ``except`` cannot catch it)."""

    def __init__(self, group_start: str | None) -> None:
        super().__init__(group_start)
        self.group_start = group_start


class _Probe(WorkflowContext):
    """A replay that stops at the cut and says which ``wf.parallel`` call holds it."""

    cut: str = ""
    group_start: str | None = None

    def _mint_key(self, name: Any, *, prefix: str = "") -> str:
        key = super()._mint_key(name, prefix=prefix)
        if self.fan_out and self.group_start is None:
            self.group_start = key
        if key == self.cut or key not in self.steps:
            raise _Reached(self.group_start if self.fan_out else None)
        return key

    def parallel(self, calls: Any, **step_options: Any) -> list[Any]:
        outer, self.group_start = self.group_start, None
        try:
            return super().parallel(calls, **step_options)
        finally:
            self.group_start = outer


class _RolledBack(Exception):
    """Undoes whatever the probe might have written."""


def _parallel_start(run: WorkflowRun, definition: WorkflowLike, steps: list[WorkflowStep],
                    asked: str, input: UserJSON) -> str | None:
    """The first step of the ``wf.parallel`` call that reached ``asked`` (the call
    reruns whole), or None: not in one. Replays the body over the steps recorded before
    ``asked`` without calling any function; a workflow that calls ``parallel`` nowhere
    is not replayed."""
    nodes = (definition.analysis.graph or {}).get("nodes", [])
    if definition.fn is None or not any(n.get("kind") == "parallel" for n in nodes):
        return None
    index = next(i for i, s in enumerate(steps) if s.step_name == asked)
    before = {s.step_name: s for s in steps[:index]
              if s.status in (StepStatus.SUCCEEDED, StepStatus.FAILED)}
    probe = _Probe(run=run, steps=before, work=store.UnitOfWork(run.pk, "fork-probe"))
    probe.cut = asked
    start: str | None = None
    try:
        with transaction.atomic():
            try:
                definition.fn(probe, run.input if input is UNSET else input)
            except _Reached as reached:
                start = reached.group_start
            except (Exception, WorkflowSignal):  # noqa: S110 - the prefix check says why
                pass
            raise _RolledBack
    except _RolledBack:
        pass
    return start


def check_prefix(plan: ForkPlan, *, input: UserJSON = UNSET) -> None:
    """Refuse a fork the current code would not replay: replayed dry (no function
    called, nothing written) over the kept steps, it must ask for them in their order
    (a graph must then fire the chosen node); with a new ``input``, the replay takes it.

    Raises:
        WorkflowForkError: ``FORK_DIVERGES``, naming the step asked and the one recorded.
    """
    if not plan.kept:
        return  # from the start: nothing is kept, nothing can diverge
    # A DSL body must ask for the kept steps in their order; what it asks next is the
    # rerun's to decide (the chosen step, or the code that replaced it). A graph must
    # still fire the chosen node.
    divergence = first_divergence(plan.source, steps=plan.kept_rows, input=input,
                                  until=(plan.cut or None) if plan.graph else None)
    if divergence is None:
        return
    raise WorkflowForkError(
        f"run {plan.source.pk} cannot be rerun from '{public_step_name(plan.cut)}' on the "
        f"current code: {divergence.message}", code="FORK_DIVERGES", run_id=plan.source.pk,
        step_recorded=divergence.step_recorded, step_asked=divergence.step_asked)
