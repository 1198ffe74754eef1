"""The SVG drawing of a workflow's graph, with a run's progress laid over it.

A layered (Sugiyama) layout of our own (``graph_layout``: long edges routed through the
layers they span, crossings reduced, back edges and loops up the side, labels off the
nodes), cached per definition version, so drawing a run costs only its overlay. No
Graphviz, no JavaScript, no network: the SVG is inline in the admin page and styled by the
admin's CSS variables, so it follows its dark mode.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils.html import escape

from ..graph.planner import logical
from ..models import WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import registry
from ..status import StepStatus
from . import graph_layout

NODE_W, NODE_H = 190, 50
SIZES = graph_layout.Sizes(node_w=NODE_W, node_h=NODE_H)
EDGE_LABEL_LIMIT = 22
MARKER_KINDS = frozenset({"start", "end"})
_REPEAT = re.compile(r"#\d+$")

STYLE = """
.pk-graph { font: 12px/1.2 var(--font-family-primary, sans-serif); }
.pk-graph .node rect { fill: var(--body-bg, #fff); stroke: var(--border-color, #999);
  stroke-width: 1.5; }
.pk-graph .node text { fill: var(--body-fg, #333); }
.pk-graph .node .sub { fill: var(--body-quiet-color, #666); font-size: 11px; }
.pk-graph .node.marker rect { fill: var(--darkened-bg, #eee); }
.pk-graph .node.unknown rect { stroke-dasharray: 4 3; }
.pk-graph .node.not-reached rect { stroke: var(--hairline-color, #ccc); }
.pk-graph .node.not-reached text { fill: var(--body-quiet-color, #999); }
.pk-graph .node.pending rect { stroke: #8a8a8a; stroke-dasharray: 2 2; }
.pk-graph .node.scheduled rect { stroke: #3b82c4; stroke-dasharray: 6 3; }
.pk-graph .node.running rect { stroke: #3b82c4; stroke-width: 3; }
.pk-graph .node.succeeded rect { stroke: #2e9d50; stroke-width: 2.5; }
.pk-graph .node.failed rect { stroke: #d23b3b; stroke-width: 3; fill: rgba(210,59,59,.12); }
.pk-graph .node.suspended rect { stroke: #d89b1c; stroke-width: 3; }
.pk-graph .edge path { fill: none; stroke: var(--body-quiet-color, #888); stroke-width: 1.3; }
.pk-graph .edge.taken path { stroke: var(--body-fg, #333); stroke-width: 2.6; }
.pk-graph .edge.untaken path { stroke: var(--hairline-color, #ccc); stroke-dasharray: 4 4; }
.pk-graph .edge.on_error path { stroke-dasharray: 2 3; }
.pk-graph .edge text { fill: var(--body-quiet-color, #666); font-size: 11px; }
.pk-graph .edge.taken text { fill: var(--body-fg, #333); font-weight: bold; }
.pk-graph a:hover rect { stroke-width: 3.5; }
"""


def step_anchor(step_name: str) -> str:
    """The HTML id of a step on the run page (graph nodes link to ``#`` + it)."""
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", step_name).strip("-").lower()[:40]
    return f"step-{slug}-{hashlib.sha256(step_name.encode()).hexdigest()[:8]}"


@dataclass
class Layout:
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    position: dict[str, tuple[int, int]]
    width: int
    height: int
    routes: dict[int, graph_layout.Route] = field(default_factory=dict)


@dataclass
class NodeState:
    """What a run did at one node of the graph (its step keys folded together)."""

    keys: list[str] = field(default_factory=list)
    status: str = "not-reached"
    attempts: int = 0
    retried: bool = False
    items: int = 0
    items_done: int = 0
    error: str = ""
    wake_at: datetime | None = None
    child_run: Any = None
    decided_by: Any = None


# --- layout (cached per definition version) ------------------------------------------------


def _shown_label(edge: dict[str, Any]) -> str | None:
    """An edge's label as drawn (long ones cut), so that the layout sizes its box."""
    label = edge.get("label")
    if not label:
        return None
    text = str(label)
    return text if len(text) <= EDGE_LABEL_LIMIT else text[: EDGE_LABEL_LIMIT - 1] + "…"


def _layout(graph: dict[str, Any]) -> Layout:
    nodes = graph["nodes"]
    edges = graph["edges"]
    drawing = graph_layout.layout([n["id"] for n in nodes],
                                  [(e["source"], e["target"]) for e in edges],
                                  [_shown_label(e) for e in edges], SIZES,
                                  loops=[i for i, e in enumerate(edges)
                                         if e.get("kind") == "loop"])
    return Layout(nodes=nodes, edges=edges, position=drawing.position, width=drawing.width,
                  height=drawing.height, routes=drawing.routes)


_LAYOUTS: dict[tuple[str, str], Layout] = {}
_LAYOUTS_KEPT = 256


def layout_for(workflow: str, graph_hash: str, graph: dict[str, Any]) -> Layout:
    """The layout of a definition version, computed once per process."""
    key = (workflow, graph_hash)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _layout(graph)
    return layout


# --- which graph a run follows ---------------------------------------------------------------


def run_graph(run: WorkflowRun) -> dict[str, Any] | None:
    """The graph of the definition version the run started on (stored if it changed)."""
    definition = registry.find_workflow(run.workflow)
    if definition is not None and (not run.graph_hash or
                                   definition.graph_hash == run.graph_hash):
        return definition.analysis.graph
    version = WorkflowVersion.objects.filter(workflow=run.workflow,
                                             graph_hash=run.graph_hash).first()
    if version is not None and version.graph.get("nodes"):
        return {"nodes": version.graph["nodes"], "edges": version.graph["edges"]}
    return definition.analysis.graph if definition is not None else None


# --- the overlay -----------------------------------------------------------------------------


#: The step columns the overlay reads.
OVERLAY_FIELDS = ("step_name", "rpc_name", "status", "attempt_count", "error", "wake_at",
                  "child_run_id", "result")

_PRIORITY = [StepStatus.FAILED, StepStatus.RUNNING, StepStatus.SCHEDULED, StepStatus.PENDING,
             StepStatus.SUSPENDED, StepStatus.SUCCEEDED]


def _node_of(key: str, by_step_name: dict[str, str]) -> str | None:
    for candidate in (key, _REPEAT.sub("", key), logical(key)):
        if candidate in by_step_name:
            return by_step_name[candidate]
    return None


def overlay(graph: dict[str, Any], steps: list[WorkflowStep]) -> dict[str, NodeState]:
    """Each node's state in the run: statuses folded over its step keys."""
    by_step_name = {n.get("step_name") or n["id"]: n["id"] for n in graph["nodes"]
                    if n["kind"] not in MARKER_KINDS}
    # Steps with computed names (f"Label {sku}") belong to the dynamic node of their function.
    dynamic: dict[str, list[str]] = defaultdict(list)
    for n in graph["nodes"]:
        if n.get("dynamic") and n.get("rpc_name"):
            dynamic[n["rpc_name"]].append(n["id"])
    states: dict[str, NodeState] = defaultdict(NodeState)
    statuses: dict[str, set[str]] = defaultdict(set)
    for step in steps:
        node = _node_of(step.step_name, by_step_name)
        if node is None and len(dynamic.get(step.rpc_name or "", ())) == 1:
            node = dynamic[step.rpc_name or ""][0]
        if node is None:
            continue
        state = states[node]
        state.keys.append(step.step_name)
        statuses[node].add(step.status)
        state.attempts += step.attempt_count
        state.retried = state.retried or step.attempt_count > 1
        if step.step_name.endswith("]"):
            state.items += 1
            state.items_done += step.status == StepStatus.SUCCEEDED
        if step.status == StepStatus.FAILED and step.error:
            state.error = str(step.error.get("message", ""))
        if step.wake_at is not None:
            state.wake_at = step.wake_at
        if step.child_run_id:
            state.child_run = step.child_run_id
        if isinstance(step.result, dict) and step.result.get("status") == "decided":
            state.decided_by = step.result.get("decided_by")
    for node, seen in statuses.items():
        states[node].status = next(str(s) for s in _PRIORITY if s in seen)
    return dict(states)


def _reached(graph: dict[str, Any], states: dict[str, NodeState]) -> set[str]:
    """Step nodes with rows, and the structural nodes (branches, returns, markers, unknown
    regions) that a finished predecessor led to."""
    predecessors: dict[str, list[str]] = defaultdict(list)
    for edge in graph["edges"]:
        if edge.get("kind") != "loop":
            predecessors[edge["target"]].append(edge["source"])
    structural = {n["id"] for n in graph["nodes"] if n.get("step_name") is None}
    reached = {n["id"] for n in graph["nodes"] if n["kind"] == "start"} | set(states)

    def finished(node: str) -> bool:
        state = states.get(node)
        return node in reached and (state is None or state.status == StepStatus.SUCCEEDED)

    changed = True
    while changed:
        changed = False
        for node in structural - reached:
            if any(finished(p) for p in predecessors[node]):
                reached.add(node)
                changed = True
    return reached


# --- drawing ---------------------------------------------------------------------------------


def _text(x: float, y: float, content: str, css: str = "", limit: int = 28) -> str:
    shown = content if len(content) <= limit else content[: limit - 1] + "…"
    klass = f' class="{css}"' if css else ""
    return f'<text x="{x:.0f}" y="{y:.0f}" text-anchor="middle"{klass}>{escape(shown)}</text>'


def _sub_line(node: dict[str, Any], state: NodeState | None) -> str:
    if node["kind"] in MARKER_KINDS:
        return ""
    if state is None:
        return node.get("rpc_name") or ("" if node["kind"] == "step" else node["kind"])
    parts = [state.status]
    if state.items:
        parts = [f"{state.items_done}/{state.items} done"]
    if state.retried:
        parts.append(f"{state.attempts} attempts")
    if state.wake_at is not None and state.status != StepStatus.SUCCEEDED:
        parts.append("wakes " + state.wake_at.strftime("%Y-%m-%d %H:%M:%S"))
    if state.decided_by is not None:
        parts.append(f"decided by user {state.decided_by}")
    return " · ".join(parts)


def _edge_path(layout: Layout, index: int) -> tuple[str, float, float] | None:
    """The path of edge ``index`` and its label's centre and baseline."""
    route = layout.routes.get(index)
    if route is None:
        return None
    label = route.label or (0.0, 0.0)
    return route.d(), label[0], label[1]


def draw(layout: Layout, states: dict[str, NodeState] | None = None, *,
         title: str = "") -> str:
    """The SVG text: the layout, with the run's states when given."""
    reached = _reached({"nodes": layout.nodes, "edges": layout.edges}, states) \
        if states is not None else set()
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pk-graph" role="img" '
             f'width="{layout.width}" height="{layout.height}" '
             f'viewBox="0 0 {layout.width} {layout.height}">',
             f"<title>{escape(title)}</title>" if title else "",
             f"<style>{STYLE}</style>",
             '<defs><marker id="pk-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
             'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" '
             'orient="auto-start-reverse">'
             '<path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>']
    taken_from: dict[str, bool] = defaultdict(bool)
    for edge in layout.edges:
        if edge["source"] in reached and edge["target"] in reached:
            taken_from[edge["source"]] = True
    for index, edge in enumerate(layout.edges):
        drawn = _edge_path(layout, index)
        if drawn is None:
            continue
        path, lx, ly = drawn
        classes = ["edge", edge.get("kind") or "next"]
        if states is not None and edge["source"] in reached:
            if edge["target"] in reached:
                classes.append("taken")
            elif taken_from[edge["source"]]:
                classes.append("untaken")
        name = escape(f"{edge['source']}->{edge['target']}")
        parts.append(f'<g class="{" ".join(classes)}" data-edge="{name}"><path d="{path}" '
                     'marker-end="url(#pk-arrow)"/>')
        if edge.get("label"):
            parts.append(_text(lx, ly, str(edge["label"]), limit=EDGE_LABEL_LIMIT))
        parts.append("</g>")
    for node in layout.nodes:
        x, y = layout.position[node["id"]]
        state = (states or {}).get(node["id"])
        classes = ["node", node["kind"]]
        if node["kind"] in MARKER_KINDS:
            classes.append("marker")
        elif states is not None and node["kind"] != "unknown":
            classes.append(state.status if state else
                           ("not-reached" if node["id"] not in reached else "passed"))
        tooltip = node.get("label") or node["id"]
        if state is not None and state.error:
            tooltip += f"\nerror: {state.error}"
        body = [f'<g class="{" ".join(classes)}" data-node="{escape(node["id"])}">',
                f"<title>{escape(tooltip)}</title>",
                f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8"/>',
                _text(x + NODE_W / 2, y + 20, node.get("label") or node["id"]),
                _text(x + NODE_W / 2, y + 37, _sub_line(node, state), "sub", limit=32)]
        body.append("</g>")
        if state is not None and state.child_run:
            url = reverse("admin:pikku_workflows_workflowrun_change", args=[state.child_run])
            parts.append(f'<a href="{escape(url)}" class="child-run">{"".join(body)}</a>')
        elif state is not None:
            anchor = step_anchor(state.keys[0])
            parts.append(f'<a href="#{anchor}">{"".join(body)}</a>')
        else:
            parts.append("".join(body))
    parts.append("</svg>")
    return "".join(p for p in parts if p)


def definition_svg(definition: Any) -> str:
    """The SVG of a registered workflow definition (DSL or graph), no run."""
    graph = definition.analysis.graph
    layout = layout_for(definition.name, definition.graph_hash, graph)
    return draw(layout, title=f"{definition.name} ({definition.graph_hash})")


def run_svg(run: WorkflowRun, steps: list[WorkflowStep] | None = None) -> str:
    """The SVG of the run's definition version with the run laid over it."""
    graph = run_graph(run)
    if graph is None:
        return ""
    if steps is None:
        steps = list(WorkflowStep.objects.filter(run=run).only(*OVERLAY_FIELDS))
    layout = layout_for(run.workflow, run.graph_hash or "", graph)
    title = f"{run.workflow} run {run.pk}: {run.status}"
    return draw(layout, overlay(graph, steps), title=title)


__all__ = ["definition_svg", "run_svg", "step_anchor"]
