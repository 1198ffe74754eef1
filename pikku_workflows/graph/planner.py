"""The graph planner: from a run's step instances, decide which nodes fire next.

Pure functions only (no database), shared by inline runs and runs on workers:
- forward edges fire a node once (so joins collapse), back edges create ``node#N``;
- a node waits for every node its input (or ``for_each``) references;
- ``for_each`` fans out ``node[i]`` per item in source order (``sequential``: one at a time);
- a keyed ``next`` follows the branch the node chose with ``ctx.branch(key)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .definition import GraphDefinition

_ITEM = re.compile(r"\[(\d+)\]$")
_VISIT = re.compile(r"#(\d+)$")
ENTRY = "__entry__"


@dataclass(frozen=True)
class Instance:
    """What the planner needs to know about one step row."""

    key: str
    status: str
    from_step: str | None = None
    branch: str | None = None


@dataclass(frozen=True)
class Firing:
    """A node instance to start."""

    node: str
    key: str
    from_step: str | None
    item_index: int | None = None
    error_of: str | None = None  # set for an on_error node: the failed step's key


@dataclass
class Plan:
    to_fire: list[Firing] = field(default_factory=list)
    in_flight: bool = False
    # node -> the nodes it still waits for (its edge fired, its inputs are not ready)
    blocked: dict[str, list[str]] = field(default_factory=dict)


def logical(key: str) -> str:
    """``node``, ``node#2``, ``node[3]`` and ``node#2[3]`` all belong to ``node``."""
    return _VISIT.sub("", _ITEM.sub("", key))


def item_index(key: str) -> int | None:
    match = _ITEM.search(key)
    return int(match.group(1)) if match else None


def completed_nodes(graph: GraphDefinition, instances: list[Instance],
                    widths: dict[str, int | None]) -> set[str]:
    """Nodes whose result is available (for a fan-out: every item succeeded)."""
    done: set[str] = set()
    items: dict[str, int] = {}
    for inst in instances:
        node = logical(inst.key)
        if node not in graph.nodes or inst.status != "succeeded":
            continue
        if graph.nodes[node].for_each is None:
            done.add(node)
        else:
            items[node] = items.get(node, 0) + 1
    for node, width in widths.items():
        if width is not None and items.get(node, 0) >= width:
            done.add(node)
    return done


def plan(graph: GraphDefinition, instances: list[Instance], widths: dict[str, int | None],
         entry: list[str]) -> Plan:
    """Decide what fires next.

    Args:
        graph: The definition the run follows.
        instances: Every step row of the run.
        widths: For each ``for_each`` node, the length of its source list once known.
        entry: The entry nodes of this run (one if it started at ``start_node``).
    """
    result = Plan()
    by_node: dict[str, list[Instance]] = {}
    for inst in instances:
        by_node.setdefault(logical(inst.key), []).append(inst)
        if inst.status != "succeeded":
            result.in_flight = True
    done = completed_nodes(graph, instances, widths)
    consumed = {(inst.from_step or ENTRY, logical(inst.key)) for inst in instances}

    candidates: list[tuple[str, str]] = [(ENTRY, node) for node in entry]
    emitted_fanned: set[str] = set()
    for inst in instances:
        node = logical(inst.key)
        if node not in graph.nodes or inst.status != "succeeded":
            continue
        spec = graph.nodes[node]
        if spec.for_each is not None:
            # A fan-out emits its edges once, from the node, when every item is done.
            if node in emitted_fanned or node not in done:
                continue
            emitted_fanned.add(node)
            source = node
        else:
            source = inst.key
        candidates += [(source, target) for target in spec.targets(inst.branch)]
    planned: set[str] = set()
    index = 0
    while index < len(candidates):  # grows when an empty fan-out passes its edges on
        source, target = candidates[index]
        index += 1
        spec = graph.nodes[target]
        waits = sorted(d for d in spec.dependencies() if d not in done)
        existing = by_node.get(target, [])
        back_edge = source != ENTRY and logical(source) in graph.reach[target] | {target}
        if spec.for_each is not None:
            if target in planned or (existing and not back_edge and _fanout_settled(
                    target, existing, widths)):
                continue
            if waits or widths.get(target) is None:
                result.blocked[target] = waits or [spec.for_each["$ref"]]
                continue
            planned.add(target)
            if widths[target] == 0:
                # An empty fan-out completes at once and lets downstream fire.
                candidates += [(target, t) for t in spec.targets()]
                continue
            result.to_fire += _fanout_firings(target, spec.mode, existing,
                                              widths[target] or 0, source)
            continue
        if back_edge:
            if (source, target) in consumed:
                continue
        elif existing or target in planned:
            continue  # node-once: a join fires on its first ready predecessor
        if waits:
            result.blocked[target] = waits
            continue
        planned.add(target)
        visits = len(existing)
        key = target if visits == 0 else f"{target}#{visits}"
        result.to_fire.append(Firing(target, key, None if source == ENTRY else source))
    return result


def _fanout_settled(node: str, existing: list[Instance], widths: dict[str, int | None]) -> bool:
    width = widths.get(node)
    return width is not None and len(existing) >= width


def _fanout_firings(node: str, mode: str, existing: list[Instance], width: int,
                    source: str) -> list[Firing]:
    have = {item_index(inst.key) for inst in existing}
    missing = [i for i in range(width) if i not in have]
    if mode == "sequential":
        if any(inst.status != "succeeded" for inst in existing) or not missing:
            return []
        missing = missing[:1]
    from_step = None if source == ENTRY else source
    return [Firing(node, f"{node}[{i}]", from_step, i) for i in missing]
