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
from functools import lru_cache
from typing import Any

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


@lru_cache(maxsize=65536)
def logical(key: str) -> str:
    """``node``, ``node#2``, ``node[3]`` and ``node#2[3]`` all belong to ``node``."""
    return _VISIT.sub("", _ITEM.sub("", key))


def item_index(key: str) -> int | None:
    match = _ITEM.search(key)
    return int(match.group(1)) if match else None


class Planner:
    """Decides what fires next, incrementally: a plan costs what changed since the last
    one (the instances observed, the edges still waiting), never the run's whole history,
    so a cycle that runs a thousand times is linear in its length.

    Feed it every step row of the run once with :meth:`observe`, then again each row a
    wave changed; :meth:`plan` returns the next wave.
    """

    def __init__(self, graph: GraphDefinition, entry: list[str]) -> None:
        self.graph = graph
        self.known: dict[str, Instance] = {}
        self._keys: dict[str, list[str]] = {}  # node -> its instance keys, in order
        self._open: set[str] = set()  # keys not succeeded
        self._succeeded: set[str] = set()  # nodes (not fan-outs) with a succeeded instance
        self._items_done: dict[str, int] = {}
        self._fanned_branch: dict[str, str | None] = {}
        self._emitted: set[str] = set()  # fan-outs whose edges went out
        self._consumed: set[tuple[str, str]] = set()
        # Edges still to decide: new ones, and those waiting for inputs or a fan-out.
        self._live: list[tuple[str, str]] = [(ENTRY, node) for node in entry]

    def observe(self, inst: Instance) -> None:
        """Take in a new step row, or a change of one (status, branch)."""
        node = logical(inst.key)
        spec = self.graph.nodes.get(node)
        if spec is None:
            return
        old = self.known.get(inst.key)
        self.known[inst.key] = inst
        if old is None:
            self._keys.setdefault(node, []).append(inst.key)
            self._consumed.add((inst.from_step or ENTRY, node))
        if inst.status != "succeeded":
            self._open.add(inst.key)
            return
        self._open.discard(inst.key)
        if old is not None and old.status == "succeeded":
            return
        if spec.for_each is None:
            self._succeeded.add(node)
            self._live += [(inst.key, target) for target in spec.targets(inst.branch)]
        else:
            self._items_done[node] = self._items_done.get(node, 0) + 1
            self._fanned_branch.setdefault(node, inst.branch)

    def instances(self, node: str) -> list[Instance]:
        return [self.known[key] for key in self._keys.get(node, ())]

    def done(self, widths: dict[str, int | None]) -> set[str]:
        """Nodes whose result is available (for a fan-out: every item succeeded)."""
        done = set(self._succeeded)
        for node, width in widths.items():
            if width is not None and self._items_done.get(node, 0) >= width:
                done.add(node)
        return done

    def plan(self, widths: dict[str, int | None]) -> Plan:
        """The next wave.

        Args:
            widths: For each ``for_each`` node, the length of its source list once known.
        """
        graph = self.graph
        result = Plan(in_flight=bool(self._open))
        done = self.done(widths)
        for node in sorted(done - self._succeeded - self._emitted):
            # A fan-out emits its edges once, from the node, when every item is done.
            self._emitted.add(node)
            self._live += [(node, t) for t in graph.nodes[node].targets(
                self._fanned_branch.get(node))]
        candidates, self._live = self._live, []
        waiting: dict[Any, tuple[str, str]] = {}
        planned: set[str] = set()
        index = 0
        while index < len(candidates):  # grows when an empty fan-out passes its edges on
            source, target = candidates[index]
            index += 1
            spec = graph.nodes[target]
            waits = sorted(d for d in spec.dependencies() if d not in done)
            count = len(self._keys.get(target, ()))
            back_edge = source != ENTRY and (
                logical(source) == target or logical(source) in graph.reach[target])
            if spec.for_each is not None:
                if target in planned:
                    waiting[(source, target)] = (source, target)
                    continue
                width = widths.get(target)
                if count and not back_edge and width is not None and count >= width:
                    continue  # settled for good
                if waits or width is None:
                    result.blocked[target] = waits or [spec.for_each["$ref"]]
                    waiting[(source, target)] = (source, target)
                    continue
                planned.add(target)
                if width == 0:
                    # An empty fan-out completes at once and lets downstream fire.
                    candidates += [(target, t) for t in spec.targets()]
                    continue
                result.to_fire += _fanout_firings(target, spec.mode, self.instances(target),
                                                  width, source)
                waiting[(source, target)] = (source, target)  # sequential: the next item
                continue
            if back_edge:
                if (source, target) in self._consumed:
                    continue
            elif count or target in planned:
                continue  # node-once: a join fires on its first ready predecessor
            if waits:
                result.blocked[target] = waits
                # One waiting edge per forward target is enough (any predecessor fires it).
                waiting.setdefault((source, target) if back_edge else target, (source, target))
                continue
            planned.add(target)
            key = target if count == 0 else f"{target}#{count}"
            result.to_fire.append(Firing(target, key, None if source == ENTRY else source))
        self._live += list(waiting.values())
        return result


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
