"""What a run did on its graph: each node's state and text, and which edges it took.

The drawing (``graph_svg``) only styles what this module decides, so that every rule of
the overlay is here and testable without SVG: a node is ``not-reached`` unless the run
recorded a step for it or passed through it; an edge is ``taken`` only when the run went
along it, from the step before to the step after (``from_step_name``, or the order the
steps were recorded in), through branches, loops and markers; every other edge is
``untaken``. Counts, attempts, retries, waits and decisions are spelled out, never cut:
a node's lines abbreviate the date, its tooltip gives the full text.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from ..engine.clock import clock
from ..graph.planner import logical
from ..models import WorkflowStep
from ..status import RunStatus, StepStatus, waits_to_retry
from ..step_keys import COMPENSATION_SUFFIX, GATE_KINDS, step_label
from .timeline import format_duration

MARKER_KINDS = frozenset({"start", "end"})
#: The step columns the overlay reads.
OVERLAY_FIELDS = ("step_name", "rpc_name", "status", "attempt_count", "error", "wake_at",
                  "child_run_id", "result", "from_step_name", "branch_taken")
#: A node's CSS class when several of its steps differ: the first that applies.
_PRIORITY = ("failed", "retrying", "running", "scheduled", "pending", "suspended",
             "cancelled", "succeeded")
#: The kinds of node that get a badge (the engine's gates and waits).
BADGES = {"approval": "approval", "suspend": "suspend", "sleep": "sleep", "event": "event",
          "message": "message"}
#: The kinds of node that wait for something sent from outside the run (DESIGN 8.2).
WAIT_KINDS = frozenset({"event", "message"})
_REPEAT = re.compile(r"#\d+$")
_TEMPLATE_PART = re.compile(r"\{[^{}]*\}")
#: How many alternative paths between two steps are looked at before giving up.
_MAX_PATHS = 32
#: How far back a step without a path from its predecessor looks for one.
_HISTORY = 8


@dataclass
class NodeState:
    """What a run did at one node of the graph (its step keys folded together).

    ``status`` is the node's CSS class: a step status, or ``retrying`` (a failed attempt,
    the next one due at ``wake_at``), ``cancelled`` (closed by the run's cancellation),
    ``passed`` (a branch, loop or marker the run went through) or ``not-reached``.
    """

    keys: list[str] = field(default_factory=list)
    status: str = "not-reached"
    counts: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    retried: bool = False
    error: str = ""
    wake_at: datetime | None = None
    child_run: Any = None
    decision: str = ""  # approved, rejected, decided, expired
    decided_by: Any = None
    decided_by_name: str = ""
    decided_at: str = ""
    note: str = ""

    @property
    def total(self) -> int:
        return len(self.keys)


@dataclass
class RunPath:
    """The edges (indexes into the graph's edge list) the run took, and the nodes it
    reached (with a step, or passed through)."""

    taken: set[int] = field(default_factory=set)
    reached: set[str] = field(default_factory=set)


# --- which node a step key belongs to -------------------------------------------------------


def _template(step_name: str) -> re.Pattern[str] | None:
    """A matcher of the keys a computed step name (``Label {sku}``) produces."""
    if "{" not in step_name:
        return None
    parts = _TEMPLATE_PART.split(step_name)
    if len(parts) < 2:
        return None
    return re.compile("^" + "(.+?)".join(re.escape(p) for p in parts) + r"(?:#\d+)?$",
                      re.DOTALL)


class NodeFinder:
    """Maps step keys to node ids: exact names, repeats (``#N``), graph instances
    (``node[i]``, ``node#N``), computed names (``f"Label {sku}"``), then the function."""

    def __init__(self, graph: dict[str, Any]) -> None:
        self.by_step_name: dict[str, str] = {
            n.get("step_name") or n["id"]: n["id"] for n in graph["nodes"]
            if n["kind"] not in MARKER_KINDS}
        self.templates: list[tuple[re.Pattern[str], str]] = [
            (pattern, n["id"]) for n in graph["nodes"]
            if n.get("dynamic") and n.get("step_name")
            and (pattern := _template(n["step_name"])) is not None]
        self.by_function: dict[str, list[str]] = defaultdict(list)
        for n in graph["nodes"]:
            if n.get("dynamic") and n.get("rpc_name"):
                self.by_function[n["rpc_name"]].append(n["id"])

    def __call__(self, key: str, rpc_name: str | None = None) -> str | None:
        base = key
        if key.endswith(COMPENSATION_SUFFIX):  # "Charge#1:onError" is "Charge:onError"
            base = _REPEAT.sub("", key[:-len(COMPENSATION_SUFFIX)]) + COMPENSATION_SUFFIX
        for candidate in (key, base, _REPEAT.sub("", key), logical(key)):
            if candidate in self.by_step_name:
                return self.by_step_name[candidate]
        matches = [node for pattern, node in self.templates if pattern.match(key)]
        if len(matches) == 1:
            return matches[0]
        functions = self.by_function.get(rpc_name or "", [])
        return functions[0] if len(functions) == 1 else None


# --- each node's state ------------------------------------------------------------------------


def _key_status(step: WorkflowStep, run_status: str | None) -> str:
    error = step.error or {}
    if step.status == StepStatus.FAILED:
        if error.get("code") == "WORKFLOW_CANCELLED":
            return "cancelled"
        # No run status (a drawing without its run): live, as before.
        if not error.get("fatal") and waits_to_retry(step.status, step.wake_at,
                                                     run_status or ""):
            return "retrying"  # a failed attempt; the next one is due at wake_at
    return str(step.status)


def _decision(result: Any) -> tuple[str, Any, str, str]:
    """(decision, decided_by, decided_at, note) of a settled approval gate's result."""
    if not isinstance(result, dict):
        return "", None, "", ""
    if result.get("status") == "expired":
        return "expired", None, "", ""
    if result.get("status") != "decided":
        return "", None, "", ""
    data = result.get("data")
    decision = "decided"
    note = ""
    if isinstance(data, dict):
        if isinstance(data.get("approved"), bool):
            decision = "approved" if data["approved"] else "rejected"
        for field_name in ("note", "comment", "reason"):
            if isinstance(data.get(field_name), str) and data[field_name].strip():
                note = data[field_name].strip()
                break
    return decision, result.get("decided_by"), str(result.get("decided_at") or ""), note


def overlay(graph: dict[str, Any], steps: Iterable[WorkflowStep], *,
            run_status: str | None = None) -> dict[str, NodeState]:
    """Each node's state in the run: its step keys' statuses, attempts and waits folded.

    Args:
        graph: The drawn graph (``{"nodes", "edges"}``).
        steps: The run's step rows (``OVERLAY_FIELDS`` loaded).
        run_status: The run's status: a failed attempt waits for its retry only in a live
            run.

    Returns:
        The states of the nodes the run recorded steps for, by node id.
    """
    node_of = NodeFinder(graph)
    states: dict[str, NodeState] = defaultdict(NodeState)
    for step in steps:
        node = node_of(step.step_name, step.rpc_name)
        if node is None:
            continue
        state = states[node]
        state.keys.append(step.step_name)
        state.counts[_key_status(step, run_status)] += 1
        state.attempts += step.attempt_count
        state.retried = state.retried or step.attempt_count > 1
        if step.error and step.status == StepStatus.FAILED:
            state.error = str(step.error.get("message", ""))
        if step.wake_at is not None and step.status != StepStatus.SUCCEEDED:
            state.wake_at = step.wake_at
        if step.child_run_id:
            state.child_run = step.child_run_id
        if step.step_name.startswith(tuple(GATE_KINDS)):
            decision, by, at, note = _decision(step.result)
            if decision:
                state.decision, state.decided_by, state.decided_at = decision, by, at
                state.note = note
    for state in states.values():
        state.status = next(s for s in _PRIORITY if state.counts[s]) \
            if any(state.counts[s] for s in _PRIORITY) else "pending"
    return dict(states)


def name_deciders(states: dict[str, NodeState]) -> None:
    """Fill ``decided_by_name`` with the deciders' usernames: one query for the run, none
    when nothing was decided by a user. A user deleted since is "a deleted user"."""
    ids = {s.decided_by for s in states.values() if s.decided_by is not None}
    if not ids:
        return
    user_model = get_user_model()
    names = {pk: str(name) for pk, name in user_model._default_manager.filter(
        pk__in=ids).values_list("pk", user_model.USERNAME_FIELD)}
    for state in states.values():
        if state.decided_by is not None:
            state.decided_by_name = names.get(state.decided_by, "a deleted user")


# --- which edges the run took -----------------------------------------------------------------


class _Paths:
    """Paths between nodes through nodes that record no step (branches, loops, parallel
    calls, returns, unknown regions, markers): how the run got from one step to the next."""

    def __init__(self, graph: dict[str, Any]) -> None:
        self.edges = graph["edges"]
        self.kind = {n["id"]: n["kind"] for n in graph["nodes"]}
        self.structural = {n["id"] for n in graph["nodes"] if n.get("step_name") is None}
        self.out: dict[str, list[int]] = defaultdict(list)
        for index, edge in enumerate(self.edges):
            self.out[edge["source"]].append(index)
        # A run of 20,000 steps asks the same few questions again and again.
        self.known: dict[tuple[str, frozenset[str]], set[int]] = {}

    def between(self, source: str, targets: set[str]) -> set[int]:
        """The edges of the shortest paths from ``source`` to one of ``targets`` (at
        least one edge; through structural nodes only), where they all agree: an edge
        only some of them use is not known to be taken."""
        key = (source, frozenset(targets))
        if key not in self.known:
            self.known[key] = self._between(source, targets)
        return self.known[key]

    def _between(self, source: str, targets: set[str]) -> set[int]:
        frontier: list[tuple[str, tuple[int, ...]]] = [(source, ())]
        seen: set[str] = set()
        while frontier:
            found: list[tuple[int, ...]] = []
            following: list[tuple[str, tuple[int, ...]]] = []
            for node, path in frontier:
                for index in self.out[node]:
                    target = self.edges[index]["target"]
                    if target in targets:
                        found.append((*path, index))
                    elif target in self.structural and target not in seen:
                        following.append((target, (*path, index)))
            if found:
                common = set(found[0])
                for path in found[1:]:
                    common &= set(path)
                return common
            seen.update(node for node, _ in following)
            frontier = following[:_MAX_PATHS * 4]
        return set()


def _graph_run_path(graph: dict[str, Any], steps: list[WorkflowStep],
                    node_of: NodeFinder) -> set[int]:
    """A graph run's edges: a node's edge fired when its target ran after it (each
    instance names the one that fired it), joins included; its keyed edges only for the
    branch it took; ``on_error`` edges when it failed; edges to the end once it finished."""
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    ran: dict[str, list[WorkflowStep]] = defaultdict(list)
    for step in steps:
        node = node_of(step.step_name, step.rpc_name)
        if node is not None:
            ran[node].append(step)
    taken = set()
    for index, edge in enumerate(graph["edges"]):
        source, target = edge["source"], edge["target"]
        if kinds.get(source) == "start":
            if any(s.from_step_name is None for s in ran.get(target, ())):
                taken.add(index)
            continue
        done = [s for s in ran.get(source, ()) if s.status == StepStatus.SUCCEEDED]
        if edge.get("kind") == "on_error":
            failed = any(s.status == StepStatus.FAILED for s in ran.get(source, ()))
            if failed and target in ran:
                taken.add(index)
            continue
        if kinds.get(target) == "end":
            if done:
                taken.add(index)
            continue
        if edge.get("kind") == "loop":
            if any(s.from_step_name and node_of(s.from_step_name) == source
                   for s in ran.get(target, ())):
                taken.add(index)
            continue
        label = edge.get("label")
        if target in ran and any(label is None or s.branch_taken == label for s in done):
            taken.add(index)
    return taken


def _dsl_run_path(graph: dict[str, Any], steps: list[WorkflowStep], node_of: NodeFinder,
                  run_status: str | None) -> set[int]:
    """A DSL run's edges: from each step to the next (the step it followed, recorded
    with it, else the one recorded before it) through the branches, loops and calls
    between them; from the start to the first step; from the last step to the end when
    the run completed (or to a ``wf.cancel`` when the body cancelled it)."""
    paths = _Paths(graph)
    taken = _dsl_steps_path(graph, paths, steps, node_of, run_status)
    recorded = {node for s in steps if (node := node_of(s.step_name, s.rpc_name))}
    return taken | _joins(paths, taken, recorded)


def _joins(paths: _Paths, taken: set[int], recorded: set[str]) -> set[int]:
    """The calls of a ``wf.parallel`` all lead on: when the path goes on from one call
    (the last, in time), the other calls that ran take the same edge."""
    calls: dict[str, list[str]] = defaultdict(list)  # a call node -> its siblings
    for node, kind in paths.kind.items():
        if kind == "parallel":
            children = [paths.edges[i]["target"] for i in paths.out[node]]
            for child in children:
                calls[child] = [c for c in children if c != child]
    joined: set[int] = set()
    for index in taken:
        source, target = paths.edges[index]["source"], paths.edges[index]["target"]
        for sibling in calls.get(source, ()):
            if sibling in recorded:
                joined |= {i for i in paths.out[sibling]
                           if paths.edges[i]["target"] == target}
    return joined


def _dsl_steps_path(graph: dict[str, Any], paths: _Paths, steps: list[WorkflowStep],
                    node_of: NodeFinder, run_status: str | None) -> set[int]:
    starts = [n for n, kind in paths.kind.items() if kind == "start"]
    ends = {n for n, kind in paths.kind.items() if kind == "end"}
    taken: set[int] = set()
    history: list[str] = starts[:1]  # the nodes the run recorded steps at, in order
    last: WorkflowStep | None = None
    for step in steps:
        node = node_of(step.step_name, step.rpc_name)
        if node is None:
            continue
        sources: list[str] = []
        if step.from_step_name:
            sources.append(node_of(step.from_step_name) or "")
        # Without a recorded predecessor (sleeps, older rows), or when it leads nowhere
        # (the second call of a wf.parallel follows the first only in time), the nodes
        # before it, the most recent first.
        sources += reversed(history[-_HISTORY:])
        for source in sources:
            found = paths.between(source, {node}) if source else set()
            if found:
                taken |= found
                break
        if not history or history[-1] != node:
            history.append(node)
        last = step
    end_from: str | None = history[-1] if history else None
    if last is not None and last.status != StepStatus.SUCCEEDED:
        end_from = None
    if end_from is None:
        return taken
    if run_status == RunStatus.COMPLETED or (
            run_status == RunStatus.FAILED and last is not None
            and last.step_name.endswith(COMPENSATION_SUFFIX)):
        taken |= paths.between(end_from, ends)
    elif run_status == RunStatus.CANCELLED:
        cancels = {n for n, kind in paths.kind.items() if kind == "cancel"}
        to_cancel = paths.between(end_from, cancels) if cancels else set()
        if to_cancel:
            taken |= to_cancel
            reached = {graph["edges"][i]["target"] for i in to_cancel} & cancels
            taken |= {i for node in reached for i in paths.out[node]}
    return taken


def run_path(graph: dict[str, Any], steps: Iterable[WorkflowStep], *, graph_run: bool,
             run_status: str | None) -> RunPath:
    """The edges the run took and the nodes it reached.

    Args:
        graph: The drawn graph.
        steps: The run's step rows (``OVERLAY_FIELDS``), in any order.
        graph_run: Whether the run is a graph workflow's.
        run_status: The run's status (where a finished run's path ends).

    Returns:
        The ``RunPath``.
    """
    ordered = sorted(steps, key=lambda s: s.pk or 0)
    node_of = NodeFinder(graph)
    taken = (_graph_run_path(graph, ordered, node_of) if graph_run
             else _dsl_run_path(graph, ordered, node_of, run_status))
    reached = {n["id"] for n in graph["nodes"] if n["kind"] == "start"} | {
        node for s in ordered
                           if (node := node_of(s.step_name, s.rpc_name)) is not None}
    for index in taken:
        reached |= {graph["edges"][index]["source"], graph["edges"][index]["target"]}
    return RunPath(taken=taken, reached=reached)


def aggregate(graph: dict[str, Any], states: dict[str, NodeState], path: RunPath
              ) -> dict[str, NodeState]:
    """States for the structural nodes that stand for several steps: a ``wf.parallel``
    call (the sum of its calls) and a loop (its body's first node's count: iterations)."""
    extra: dict[str, NodeState] = {}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for edge in graph["edges"]:
        out[edge["source"]].append(edge)
    for node in graph["nodes"]:
        if node["kind"] not in ("parallel", "loop") or node["id"] not in path.reached:
            continue
        kind = "next" if node["kind"] == "parallel" else "loop"
        children = [states[e["target"]] for e in out[node["id"]]
                    if (e.get("kind") or "next") == kind and e["target"] in states
                    and e["target"] != node["id"]]
        if not children:
            continue
        folded = NodeState(status="passed")
        for child in (children if node["kind"] == "parallel" else children[:1]):
            folded.keys += child.keys
            folded.counts += child.counts
            folded.attempts += child.attempts
            folded.retried = folded.retried or child.retried
        extra[node["id"]] = folded
    return extra


# --- what a node says ---------------------------------------------------------------------------


def when(moment: datetime, now: datetime | None = None) -> str:
    """A time as short as it can be while exact to the second where it matters: the time
    alone today, else the date without the year (``Dec 4 15:06``), with the year when
    another (in the current time zone)."""
    local = timezone.localtime(moment)
    today = timezone.localtime(now or clock().now())
    if local.date() == today.date():
        return local.strftime("%H:%M:%S")
    if local.year == today.year:
        return f"{local:%b} {local.day} {local:%H:%M}"
    return f"{local:%Y-%m-%d %H:%M}"


def full_time(moment: datetime) -> str:
    """A time in full for a tooltip: date, time and zone."""
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or ''}".strip()


def _counts(state: NodeState) -> str:
    total = state.total
    failed = state.counts["failed"]
    succeeded = state.counts["succeeded"]
    if failed:
        return f"{failed} failed of {total}"
    if succeeded == total:
        return f"{total}/{total} succeeded"
    busy = [f"{state.counts[s]} {s}" for s in ("retrying", "running", "scheduled", "pending",
                                                "suspended", "cancelled") if state.counts[s]]
    return " · ".join([f"{succeeded}/{total} succeeded", *busy[:1]])


def node_lines(node: dict[str, Any], state: NodeState | None, *, overlaid: bool,
               reached: bool = False) -> tuple[list[str], list[str]]:
    """The lines under a node's label (at most two, short), and its tooltip's lines
    (everything, in full).

    Args:
        node: The graph node.
        state: What the run did there, or None.
        overlaid: Whether a run is drawn (else the definition alone).
        reached: Whether the run passed through the node (structural nodes).
    """
    kind = node["kind"]
    if kind in MARKER_KINDS:
        return [], []
    if state is None:
        if overlaid and not reached and kind not in ("branch", "loop", "parallel",
                                                    "return", "cancel", "unknown"):
            return ["not reached"], ["not reached"]
        if kind in WAIT_KINDS:
            return _wait_definition(node)
        return _definition_lines(node), []
    if state.total > 1 or kind in ("parallel", "loop"):
        lines = [_counts(state)]
        if kind == "loop":
            lines = [f"{state.total} iteration{'s' if state.total != 1 else ''}",
                     _counts(state)]
        tips = list(lines)
        if state.retried:
            lines.append(f"{state.attempts} attempts")
            tips.append(f"{state.attempts} attempts in all")
        if state.counts["retrying"] and state.wake_at is not None:
            tips.append(f"next retry at {full_time(state.wake_at)}")
        if state.error:
            tips.append(f"last error: {state.error}")
        return lines[:2], tips
    status = state.status
    lines, tips = [status], [status]
    if status == "retrying" and state.wake_at is not None:
        lines = [f"retrying at {when(state.wake_at)}",
                 f"attempt {state.attempts} failed"]
        tips = [f"retrying at {full_time(state.wake_at)}",
                f"attempt {state.attempts} failed: {state.error}"]
        return lines, tips
    if kind == "approval":
        if status == "suspended":
            lines = ["waiting for approval"]
            tips = ["waiting for approval"]
            if state.wake_at is not None:
                lines.append(f"expires {when(state.wake_at)}")
                tips.append(f"expires at {full_time(state.wake_at)}")
        elif status == "cancelled":
            lines, tips = ["cancelled"], ["cancelled while waiting for approval"]
        elif state.decision == "expired":
            lines, tips = ["expired"], ["expired before anyone decided"]
        elif state.decision:
            who = state.decided_by_name
            lines = [f"{state.decision} by {who}" if who else state.decision]
            tips = list(lines)
            if state.decided_at:
                tips[0] += f" at {state.decided_at}"
            if state.note:
                lines.append(f"“{state.note}”")
                tips.append(f"note: {state.note}")
        return lines, tips
    if kind == "suspend" and status == "suspended":
        return ["waiting for a resume"], ["waiting for resume_run (with data)"]
    if kind in WAIT_KINDS and status == "suspended":
        what = "waiting for event" if kind == "event" else "waiting for a message"
        lines, tips = [what], [f"{what} {_wait_target(node)}".rstrip()]
        if state.wake_at is not None:
            lines.append(f"until {when(state.wake_at)}")
            tips.append(f"times out at {full_time(state.wake_at)}")
        return lines, tips
    if status == "cancelled":
        return ["cancelled"], ["cancelled while it waited"]
    if state.wake_at is not None and status in ("scheduled", "pending", "suspended"):
        lines = [f"{status} · wakes {when(state.wake_at)}"]
        tips = [f"{status}, wakes at {full_time(state.wake_at)}"]
    if state.retried:
        lines.append(f"{state.attempts} attempts")
        tips.append(f"{state.attempts} attempts")
    if state.error and status == "failed":
        tips.append(f"error: {state.error}")
    return lines[:2], tips


def _definition_lines(node: dict[str, Any]) -> list[str]:
    """What a node of the definition says (no run): its function, or what the engine
    does there (the badge already names the kind)."""
    kind = node["kind"]
    if kind == "approval":
        approvers = node.get("approvers") or "any"
        expiry = node.get("expiry")
        return [f"approvers: {approvers}", *([f"expires after {expiry}"] if expiry else [])]
    if kind == "sleep":
        return [f"for {node['duration']}"] if node.get("duration") is not None else []
    if kind == "suspend":
        return ["waits for a resume"]
    text = node.get("rpc_name") or ("" if kind == "step" else kind)
    return [text] if text else []


def _wait_key(node: dict[str, Any]) -> str | None:
    """A wait node's event key as its definition names it: a literal, or a graph node's
    ref as ``trigger.order_id``; None when not literal (or no key)."""
    # The DSL's analysis says event_key (its "key" is the node's own), a graph node key.
    key = node.get("event_key", node.get("key"))
    if isinstance(key, dict) and isinstance(key.get("$ref"), str):
        key = ".".join(part for part in (key["$ref"], key.get("path")) if part)
    return key if isinstance(key, str) else None


def _wait_target(node: dict[str, Any]) -> str:
    """What a wait node waits for, as its definition says: ``payment.succeeded (key
    order-8)``, or ``on replies``; "" when the definition names nothing literal."""
    if node["kind"] == "event":
        event = node.get("event")
        if not isinstance(event, str):
            return ""
        key = _wait_key(node)
        return f"{event} (key {key})" if key is not None else event
    topic = node.get("topic")
    return f"on {topic}" if isinstance(topic, str) else ""


def _wait_definition(node: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A wait node without a run: what it waits for (the event, its key) and its
    timeout, as far as the definition names them literally; all of it in the tooltip."""
    timeout = node.get("timeout")
    until = [f"times out after {_timeout_text(timeout)}"] if timeout is not None else []
    if node["kind"] == "event":
        event, key = node.get("event"), _wait_key(node)
        lines = [event if isinstance(event, str) else "event",
                 *([f"key {key}"] if key is not None else [])]
        tips = [f"waits for event {_wait_target(node) or '(computed)'}"]
    else:
        lines = [_wait_target(node) or "message"]
        tips = [f"waits for a message {_wait_target(node)}".rstrip()]
    return (lines + until)[:2], tips + until


def _timeout_text(timeout: object) -> str:
    """A wait's timeout as its definition says it: ``1h`` as typed, seconds as ``1 h``."""
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout >= 0:
        return format_duration(float(timeout))
    return str(timeout)


def node_label(node: dict[str, Any]) -> str:
    """What the user wrote for a node: a gate's reason as typed (``Manager sign-off``,
    never ``__workflow_approval:...``), a step's name, a structure's header."""
    reason = node.get("reason")
    if node["kind"] in ("approval", "suspend") and isinstance(reason, str) and reason:
        return reason
    step_name = node.get("step_name")
    if isinstance(step_name, str) and step_name.startswith(tuple(GATE_KINDS)):
        return step_label(step_name)
    if isinstance(step_name, str) and step_name.endswith(COMPENSATION_SUFFIX):
        return f"on error of {step_label(step_name)}"  # not the engine's "Charge:onError"
    return str(node.get("label") or node["id"])


def node_title(node: dict[str, Any]) -> str:
    """A node's text in full, for its tooltip (labels are cut to fit the box)."""
    if node["kind"] == "branch" and node.get("condition"):
        return f"if {node['condition']}"
    if node["kind"] == "cancel" and node.get("reason"):
        return f"cancel: {node['reason']}"
    description = node.get("description")
    return node_label(node) + (f"\n{description}" if description else "")


__all__ = ["OVERLAY_FIELDS", "NodeState", "RunPath", "aggregate", "name_deciders",
           "node_label", "node_lines", "node_title", "overlay", "run_path", "when"]
