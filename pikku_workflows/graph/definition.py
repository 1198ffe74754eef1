"""Graph workflow definitions: nodes, edges and their validation at declaration time."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..analysis import WorkflowAnalysis
from ..declarations import (
    Concurrency,
    check_name,
    check_serializers,
    check_step_options,
    flow_options,
)
from ..durations import parse_duration
from ..exceptions import WorkflowDefinitionError
from ..status import WorkflowSource
from ..step_keys import ENGINE_KEY_PREFIX, PUBLIC_GATE_PREFIXES
from .values import ITEM, TRIGGER, Ref, dependencies, refs_in, serialize

CONFIG_KEYS = frozenset(
    {"next", "input", "for_each", "mode", "on_error", "retries", "retry_delay", "notes",
     "wait_for_event"}
)
#: The keys of a node's ``wait_for_event`` config.
WAIT_KEYS = frozenset({"event", "key", "timeout"})
#: Config keys a ``wait_for_event`` node cannot have (it calls no function).
NOT_WITH_WAIT = ("input", "for_each", "mode", "on_error", "retries", "retry_delay")
MODES = ("parallel", "sequential")


@dataclass(frozen=True)
class GraphNode:
    """One node: the function (or child workflow) it runs and where it leads."""

    id: str
    rpc_name: str
    next: Any = None  # None, [node, ...] or {branch_key: [node, ...]}
    input: Any = None  # serialized: literals, {"$ref"}, {"$template"}
    for_each: dict[str, Any] | None = None
    mode: str = "parallel"
    on_error: tuple[str, ...] = ()
    retries: int | None = None
    retry_delay: float | str | None = None
    notes: str = ""
    # ``{"event", "key" (a literal or a serialized ref), "timeout" (seconds or None)}``:
    # the node waits for an event instead of calling a function (``rpc_name`` is "").
    wait: dict[str, Any] | None = None

    @property
    def keyed(self) -> bool:
        return isinstance(self.next, dict)

    def targets(self, branch: str | None = None, *, every: bool = False) -> list[str]:
        """The nodes this node leads to (for keyed ``next``: the taken branch's)."""
        if self.next is None:
            return []
        if isinstance(self.next, dict):
            if every:
                return [t for targets in self.next.values() for t in targets]
            return list(self.next.get(branch, [])) if branch is not None else []
        return list(self.next)

    def dependencies(self) -> set[str]:
        deps = dependencies(self.input)
        if self.for_each is not None:
            deps |= dependencies(self.for_each)
        if self.wait is not None:
            deps |= dependencies(self.wait.get("key"))
        return deps

    def to_json(self, *, with_notes: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "rpc_name": self.rpc_name, "next": self.next, "input": self.input,
            "for_each": self.for_each, "mode": self.mode, "on_error": list(self.on_error),
            "retries": self.retries, "retry_delay": self.retry_delay,
        }
        if self.wait is not None:
            # Only on wait nodes: the hashes of graphs without one stay what they were.
            data["wait_for_event"] = self.wait
        if with_notes:
            data["notes"] = self.notes
        return data


@dataclass(frozen=True)
class GraphDefinition:
    """A registered graph workflow."""

    name: str
    nodes: dict[str, GraphNode]
    entry: tuple[str, ...]
    output: str | None = None
    description: str = ""
    tags: tuple[str, ...] = ()
    queue: str | None = None
    declared_in: str = ""
    source: str = WorkflowSource.GRAPH
    input_serializer: type | None = None
    output_serializer: type | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    kind = "workflow"
    fn = None

    @property
    def origin(self) -> str:
        return f"graph '{self.name}' declared in {self.declared_in}"

    def canonical(self) -> dict[str, Any]:
        """What the hash covers: structure and behaviour, not notes, description or tags."""
        return {
            "source": self.source, "entry": list(self.entry), "output": self.output,
            "nodes": {nid: node.to_json(with_notes=False) for nid, node in self.nodes.items()},
        }

    @cached_property
    def graph_hash(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @cached_property
    def analysis(self) -> Any:
        return WorkflowAnalysis(graph_hash=self.graph_hash, deterministic=False,
                                planned_steps=[], graph=self.drawing())

    def to_json(self) -> dict[str, Any]:
        """The definition as stored on its version row (enough to run it again)."""
        return {
            "entry": list(self.entry), "output": self.output,
            "nodes": {nid: node.to_json() for nid, node in self.nodes.items()},
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> GraphDefinition:
        nodes = {
            nid: GraphNode(id=nid, rpc_name=spec["rpc_name"], next=spec.get("next"),
                           input=spec.get("input"), for_each=spec.get("for_each"),
                           mode=spec.get("mode") or "parallel",
                           on_error=tuple(spec.get("on_error") or ()),
                           retries=spec.get("retries"), retry_delay=spec.get("retry_delay"),
                           notes=spec.get("notes") or "", wait=spec.get("wait_for_event"))
            for nid, spec in data["nodes"].items()
        }
        return cls(name=name, nodes=nodes, entry=tuple(data["entry"]), output=data.get("output"),
                   declared_in="a stored version")

    def drawing(self) -> dict[str, Any]:
        """Nodes and edges in the same shape as the DSL step graph, for one renderer."""
        nodes: list[dict[str, Any]] = [_draw(START_MARKER, "start", "start")]
        edges: list[dict[str, Any]] = []
        for nid, node in self.nodes.items():
            if node.wait is not None:
                drawn = _draw(nid, "event", nid, step_name=nid, event=node.wait["event"],
                              key=node.wait.get("key"), timeout=node.wait.get("timeout"))
            else:
                drawn = _draw(nid, "step", nid, step_name=nid, rpc_name=node.rpc_name,
                              dynamic=node.for_each is not None)
            if node.for_each is not None:
                drawn["for_each"] = node.for_each
                drawn["mode"] = node.mode
            if nid in self.entry:
                drawn["entry"] = True
            if nid == self.output:
                drawn["output"] = True
            if node.notes:
                drawn["notes"] = node.notes
            nodes.append(drawn)
        nodes.append(_draw(END_MARKER, "end", "end"))
        reach = self._reach()
        for nid in self.entry:
            edges.append(_edge(START_MARKER, nid, None, "next"))
        for nid, node in self.nodes.items():
            labelled = node.next.items() if node.keyed else [(None, node.targets())]
            for label, targets in labelled:
                for target in targets:
                    back = nid in reach[target]
                    kind = "loop" if back else ("branch" if label is not None else "next")
                    edges.append(_edge(nid, target, label, kind))
            for target in node.on_error:
                edges.append(_edge(nid, target, "on error", "on_error"))
            if not node.next:
                edges.append(_edge(nid, END_MARKER, None, "next"))
        return {"nodes": nodes, "edges": edges}

    @cached_property
    def sinks(self) -> list[str]:
        """The nodes no ``next`` edge leaves, in declaration order (``on_error``-only
        targets excluded: they run when the run fails anyway)."""
        handlers = {t for node in self.nodes.values() for t in node.on_error}
        nexts = {t for node in self.nodes.values() for t in node.targets(every=True)}
        return [nid for nid, node in self.nodes.items()
                if not node.targets(every=True) and (nid in nexts or nid not in handlers)]

    def _reach(self) -> dict[str, set[str]]:
        """For each node, the nodes reachable from it through ``next``."""
        reach: dict[str, set[str]] = {}
        for start in self.nodes:
            seen: set[str] = set()
            todo = list(self.nodes[start].targets(every=True))
            while todo:
                current = todo.pop()
                if current not in seen:
                    seen.add(current)
                    todo.extend(self.nodes[current].targets(every=True))
            reach[start] = seen
        return reach

    @cached_property
    def reach(self) -> dict[str, set[str]]:
        return self._reach()


def _draw(nid: str, kind: str, label: str, **extra: Any) -> dict[str, Any]:
    return {"id": nid, "kind": kind, "label": label, "step_name": extra.pop("step_name", None),
            "rpc_name": extra.pop("rpc_name", None), "dynamic": extra.pop("dynamic", False),
            **extra}


def _edge(source: str, target: str, label: str | None, kind: str) -> dict[str, Any]:
    return {"source": source, "target": target, "label": label, "kind": kind}


def _as_list(value: Any, where: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise WorkflowDefinitionError(f"{where}: expected a node id or a list of node ids, "
                                      f"not {value!r}")
    return list(items)


# The drawing's own start and end markers: `$` starts no node id, so any name is free.
START_MARKER = "$start"
END_MARKER = "$end"

#: Characters a node id may not contain: they build the keys of its instances.
RESERVED_ID_CHARACTERS = "#[]"


def build_graph(
    name: str,
    nodes: dict[str, str | None],
    config: dict[str, dict[str, Any]] | None = None,
    *,
    description: str = "",
    tags: tuple[str, ...] | list[str] = (),
    entry: str | list[str] | None = None,
    output: str | None = None,
    queue: str | None = None,
    input_serializer: type | None = None,
    output_serializer: type | None = None,
    concurrency: Concurrency | None = None,
    timeout: float | str | None = None,
) -> GraphDefinition:
    """Validate a graph declaration and build its definition (``graph_workflow``
    registers it).

    Args:
        name: The registered workflow name.
        nodes: ``{node_id: function_name}``; a name that is a workflow runs it as a child;
            None for a node that waits for an event (its ``wait_for_event`` config).
        config: Per node: ``next`` (a node, a list run in parallel, or
            ``{branch_key: node or [nodes]}`` followed after ``ctx.branch(key)``),
            ``input`` (literals, ``ref(...)``, ``template(...)``), ``for_each`` (a ref to a
            list), ``mode`` (``"parallel"`` or ``"sequential"``), ``on_error``,
            ``retries``, ``retry_delay``, ``notes``; ``wait_for_event``: ``{"event": name,
            "key": a literal or ref(...), "timeout": a duration}`` makes the node wait for
            that event (DESIGN section 8.2; its result is the event's data, or None once
            the timeout passed).
        description: Shown in the API and the admin.
        tags: Free labels.
        entry: The entry node(s) (default: the nodes no edge points to).
        output: The node whose result is the run's output (default: the results of the
            nodes that ran last).
        queue: A dedicated RQ orchestrator queue for this workflow's runs.
        input_serializer: A DRF serializer class validating the run input.
        output_serializer: A DRF serializer class validating the run output.
        concurrency: A ``Concurrency(max, key, on_full)`` for the graph's runs, as
            ``workflow(concurrency=)`` (docs/flow-control.md).
        timeout: The graph's run timeout, as ``workflow(timeout=)``.

    Returns:
        The ``GraphDefinition``.

    Raises:
        WorkflowDefinitionError: The declaration is invalid; the message names the node
            (an unknown node in ``next``/``input``/``on_error``, ``mode`` without
            ``for_each``, no entry node, and the like).
    """
    where = f"graph workflow '{name}'"
    check_serializers(where, input_serializer=input_serializer,
                      output_serializer=output_serializer)
    extra = flow_options(where, concurrency, timeout)
    if not isinstance(nodes, dict) or not nodes:
        raise WorkflowDefinitionError(f"{where}: nodes must be a non-empty dict "
                                      "{node_id: function_name}")
    for nid, rpc in nodes.items():
        if not isinstance(nid, str) or not nid or nid in (TRIGGER, ITEM):
            raise WorkflowDefinitionError(f"{where}: invalid node id {nid!r}")
        # Instance keys are built from node ids (`node[i]` per item, `node#N` per cycle
        # round) and `$` starts the engine's own refs: such ids would alias instances.
        reserved = sorted(set(nid) & set(RESERVED_ID_CHARACTERS))
        if reserved or nid.startswith("$"):
            what = f"the character(s) {' '.join(reserved)}" if reserved else "a leading '$'"
            raise WorkflowDefinitionError(
                f"{where}: node id {nid!r} contains {what}, reserved for instance keys "
                "(node[i], node#N) and the engine's own references")
        if nid.startswith((ENGINE_KEY_PREFIX, *PUBLIC_GATE_PREFIXES)):
            # The API names gates `approval:<reason>`, `suspend:<reason>`: a node so named
            # would read as one (and its name would not lead back to its key).
            raise WorkflowDefinitionError(
                f"{where}: node id {nid!r} starts with a prefix reserved for gates "
                f"({', '.join(repr(p) for p in (ENGINE_KEY_PREFIX, *PUBLIC_GATE_PREFIXES))})")
        waits = isinstance((config or {}).get(nid), dict) and \
            "wait_for_event" in (config or {})[nid]
        if waits and rpc is not None:
            raise WorkflowDefinitionError(
                f"{where}: node '{nid}' waits for an event (wait_for_event) and calls no "
                f"function: declare it as None in nodes, not {rpc!r}")
        if not waits and (not isinstance(rpc, str) or not rpc):
            raise WorkflowDefinitionError(f"{where}: node '{nid}' must name a function, "
                                          f"not {rpc!r}")
    config = config or {}
    built: dict[str, GraphNode] = {}
    for nid, options in config.items():
        if nid not in nodes:
            raise WorkflowDefinitionError(f"{where}: config for unknown node '{nid}'")
        unknown = set(options) - CONFIG_KEYS
        if unknown:
            raise WorkflowDefinitionError(
                f"{where}: node '{nid}' has unknown config key(s) {sorted(unknown)}; "
                f"known keys are {sorted(CONFIG_KEYS)}")
    for nid, rpc in nodes.items():
        built[nid] = _node(where, nid, rpc, config.get(nid, {}), nodes)
    targets = {t for node in built.values() for t in node.targets(every=True)}
    targets |= {t for node in built.values() for t in node.on_error}
    entries = _as_list(entry, f"{where}: entry") if entry is not None else [
        nid for nid in nodes if nid not in targets]
    if not entries:
        raise WorkflowDefinitionError(f"{where}: no entry node (every node is the target of "
                                      "an edge); name one with entry=")
    for nid in entries:
        if nid not in nodes:
            raise WorkflowDefinitionError(f"{where}: entry node '{nid}' is not a node")
        deps = built[nid].dependencies()
        if deps:
            raise WorkflowDefinitionError(
                f"{where}: entry node '{nid}' depends on {sorted(deps)}, which cannot have "
                "run before it")
    if output is not None and output not in nodes:
        raise WorkflowDefinitionError(f"{where}: output node '{output}' is not a node")
    try:
        caller = sys._getframe(2)  # the module that declared the graph
        declared_in = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    except ValueError:
        declared_in = "?"
    definition = GraphDefinition(name=name, nodes=built, entry=tuple(entries), output=output,
                                 description=description, tags=tuple(tags), queue=queue,
                                 declared_in=declared_in,
                                 input_serializer=input_serializer,
                                 output_serializer=output_serializer, extra=extra)
    _refuse_cycles_without_exit(where, definition)
    return definition


def _refuse_cycles_without_exit(where: str, graph: GraphDefinition) -> None:
    """A cycle none of whose nodes chooses a branch can never be left: refuse it now
    rather than let a run loop until its instance limit."""
    reach = graph.reach
    placed: set[str] = set()
    for nid in graph.nodes:
        if nid in placed or nid not in reach[nid]:
            continue
        cycle = [m for m in graph.nodes if m == nid or (m in reach[nid] and nid in reach[m])]
        placed.update(cycle)
        if not any(graph.nodes[m].keyed for m in cycle):
            raise WorkflowDefinitionError(
                f"{where}: the cycle through {', '.join(repr(m) for m in cycle)} has no "
                "exit: none of its nodes has a keyed next (followed after ctx.branch(key)), "
                "so a run would go round it forever")


def _wait_config(here: str, options: dict[str, Any], known: Any) -> dict[str, Any]:
    """A node's ``wait_for_event`` config, checked and serialized."""
    raw = options["wait_for_event"]
    if not isinstance(raw, dict):
        raise WorkflowDefinitionError(
            f"{here}: wait_for_event must be a dict {{'event', 'key', 'timeout'}}, "
            f"not {raw!r}")
    unknown = set(raw) - WAIT_KEYS
    if unknown:
        raise WorkflowDefinitionError(
            f"{here}: wait_for_event has unknown key(s) {sorted(unknown)}; known keys are "
            f"{sorted(WAIT_KEYS)}")
    clashing = [name for name in NOT_WITH_WAIT if options.get(name) is not None]
    if clashing:
        raise WorkflowDefinitionError(
            f"{here}: {', '.join(clashing)} cannot be used with wait_for_event (the node "
            "calls no function)")
    try:
        check_name(raw.get("event"), f"{here}: wait_for_event's event",
                   error=WorkflowDefinitionError)
        key = raw.get("key")
        if isinstance(key, Ref):
            if key.node != TRIGGER:
                known(key.node, "wait_for_event's key")
            key = key.to_json()
        else:
            check_name(key, f"{here}: wait_for_event's key (a string, a ref(...) or None)",
                       optional=True, error=WorkflowDefinitionError)
        timeout = raw.get("timeout")
        if timeout is not None:
            timeout = parse_duration(timeout, what=f"{here}: wait_for_event's timeout")
    except ValueError as exc:
        raise WorkflowDefinitionError(str(exc)) from None
    return {"event": raw["event"], "key": key, "timeout": timeout}


def _node(where: str, nid: str, rpc: str | None, options: dict[str, Any],
          nodes: dict[str, str | None]) -> GraphNode:
    here = f"{where}: node '{nid}'"

    def known(target: str, role: str) -> str:
        if target not in nodes:
            raise WorkflowDefinitionError(f"{here}: {role} names unknown node '{target}'")
        return target

    wait = _wait_config(here, options, known) if "wait_for_event" in options else None
    raw_next = options.get("next")
    next_value: Any = None
    if isinstance(raw_next, dict):
        next_value = {str(key): [known(t, f"next[{key!r}]")
                                 for t in _as_list(value, f"{here}: next[{key!r}]")]
                      for key, value in raw_next.items()}
    elif raw_next is not None:
        next_value = [known(t, "next") for t in _as_list(raw_next, f"{here}: next")]
    raw_input = options.get("input")
    if raw_input is not None and not isinstance(raw_input, dict):
        raise WorkflowDefinitionError(f"{here}: input must be a dict of literals, ref() and "
                                      f"template() values, not {type(raw_input).__name__}")
    input_value = serialize(raw_input) if raw_input is not None else None
    try:
        json.dumps(input_value)
    except (TypeError, ValueError) as exc:
        raise WorkflowDefinitionError(f"{here}: input is not JSON-serializable: {exc}") from None
    for reference in refs_in(input_value):
        if reference["$ref"] not in (TRIGGER, ITEM, "unknown"):
            known(reference["$ref"], "input")
    for_each = options.get("for_each")
    if for_each is not None:
        if not isinstance(for_each, Ref):
            raise WorkflowDefinitionError(f"{here}: for_each must be a ref(...) to a list")
        if for_each.node not in (TRIGGER,):
            known(for_each.node, "for_each")
    mode = options.get("mode")
    if mode is not None:
        if for_each is None:
            raise WorkflowDefinitionError(f"{here}: mode is only valid with for_each")
        if mode not in MODES:
            raise WorkflowDefinitionError(f"{here}: mode must be 'parallel' or 'sequential', "
                                          f"not {mode!r}")
    on_error = options.get("on_error")
    on_error_list = [known(t, "on_error") for t in _as_list(on_error, f"{here}: on_error")] \
        if on_error is not None else []
    retries, retry_delay = options.get("retries"), options.get("retry_delay")
    check_step_options(here, retries=retries, retry_delay=retry_delay)
    notes = options.get("notes") or ""
    return GraphNode(id=nid, rpc_name=rpc or "", next=next_value, input=input_value,
                     for_each=for_each.to_json() if for_each is not None else None,
                     mode=mode or "parallel", on_error=tuple(on_error_list), retries=retries,
                     retry_delay=retry_delay, notes=str(notes), wait=wait)
