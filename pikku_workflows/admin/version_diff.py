"""What changed between two stored versions of a workflow: steps added, removed or
changed, and edges added or removed, from their graphs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The node fields a change is read from.
COMPARED = ("kind", "label", "rpc_name", "condition")


@dataclass
class NodeChange:
    """One node in both versions whose ``COMPARED`` fields differ: ``{field: (old, new)}``."""

    key: str
    label: str
    fields: dict[str, tuple[Any, Any]]


@dataclass
class VersionDiff:
    """Nodes (by key: their step name, else their id) and edges added, removed, changed."""

    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[NodeChange] = field(default_factory=list)
    edges_added: list[tuple[str, str, str]] = field(default_factory=list)
    edges_removed: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def same(self) -> bool:
        """Whether the two graphs draw the same steps and edges."""
        return not (self.added or self.removed or self.changed or self.edges_added
                    or self.edges_removed)


def node_key(node: dict[str, Any]) -> str:
    """A node's identity across versions: its step name (what runs record), else its id
    (``start``, ``end``, ``branch_1``...)."""
    return str(node.get("step_name") or node["id"])


def _nodes(graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node_key(node): node for node in graph.get("nodes") or []}


def _edges(graph: dict[str, Any]) -> set[tuple[str, str, str]]:
    keys = {node["id"]: node_key(node) for node in graph.get("nodes") or []}
    return {(keys.get(e["source"], e["source"]), keys.get(e["target"], e["target"]),
             str(e.get("label") or e.get("kind") or "")) for e in graph.get("edges") or []}


def compare(old: dict[str, Any], new: dict[str, Any]) -> VersionDiff:
    """What ``new`` adds, removes and changes from ``old``.

    Args:
        old: A version's stored graph (``{"nodes": [...], "edges": [...]}``).
        new: The other version's.

    Returns:
        The difference, nodes in the order of the graph they come from.
    """
    before, after = _nodes(old), _nodes(new)
    diff = VersionDiff(
        added=[node for key, node in after.items() if key not in before],
        removed=[node for key, node in before.items() if key not in after])
    for key, node in after.items():
        if key in before:
            fields = {name: (before[key].get(name), node.get(name)) for name in COMPARED
                      if before[key].get(name) != node.get(name)}
            if fields:
                diff.changed.append(NodeChange(key, str(node.get("label") or key), fields))
    old_edges, new_edges = _edges(old), _edges(new)
    diff.edges_added = sorted(new_edges - old_edges)
    diff.edges_removed = sorted(old_edges - new_edges)
    return diff
