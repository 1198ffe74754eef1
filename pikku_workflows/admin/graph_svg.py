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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import escape

from ..engine.summary import is_graph_run
from ..models import WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import registry
from . import graph_layout
from .graph_overlay import (
    BADGES,
    MARKER_KINDS,
    OVERLAY_FIELDS,
    NodeState,
    RunPath,
    aggregate,
    name_deciders,
    node_label,
    node_lines,
    node_title,
    overlay,
    run_path,
)
from .urls import DEFAULT_SITE, console_url

NODE_W, NODE_H = 190, 50
SIZES = graph_layout.Sizes(node_w=NODE_W, node_h=NODE_H)
EDGE_LABEL_LIMIT = 22
#: The longest line under a node's label, in characters (11px text in NODE_W).
SUB_LIMIT = 32

STYLE = """
.pk-graph { font: 12px/1.2 var(--font-family-primary, sans-serif); }
.pk-graph .node > rect { fill: var(--body-bg, #fff); stroke: var(--border-color, #999);
  stroke-width: 1.5; }
.pk-graph .node text { fill: var(--body-fg, #333); }
.pk-graph .node .sub { fill: var(--body-quiet-color, #666); font-size: 11px; }
.pk-graph .node.marker > rect { fill: var(--darkened-bg, #eee); }
.pk-graph .node.unknown > rect { stroke-dasharray: 4 3; }
.pk-graph .node.not-reached > rect { stroke: var(--hairline-color, #ccc); stroke-dasharray: 5 4;
  fill: none; }
.pk-graph .node.not-reached text { fill: var(--body-quiet-color, #999); }
.pk-graph .node.passed > rect { stroke: var(--body-fg, #333); stroke-width: 2; }
.pk-graph .node.pending > rect { stroke: #8a8a8a; stroke-dasharray: 2 2; }
.pk-graph .node.scheduled > rect { stroke: #3b82c4; stroke-dasharray: 6 3; }
.pk-graph .node.running > rect { stroke: #3b82c4; stroke-width: 3; }
.pk-graph .node.succeeded > rect { stroke: #2e9d50; stroke-width: 2.5; }
.pk-graph .node.failed > rect { stroke: #d23b3b; stroke-width: 3; fill: rgba(210,59,59,.12); }
.pk-graph .node.suspended > rect, .pk-graph .node.retrying > rect { stroke: #d89b1c;
  stroke-width: 3; fill: rgba(216,155,28,.12); }
.pk-graph .node.suspended .sub, .pk-graph .node.retrying .sub { fill: #a86f00; }
.pk-graph .node.cancelled > rect { stroke: #6b6b6b; stroke-width: 2; stroke-dasharray: 6 3; }
.pk-graph .badge rect { fill: #6b6b6b; stroke: none; }
.pk-graph .badge.approval rect, .pk-graph .badge.suspend rect { fill: #a86f00; }
.pk-graph .badge.event rect, .pk-graph .badge.message rect { fill: #1f7f73; }
.pk-graph .node.event > rect, .pk-graph .node.message > rect { stroke-dasharray: 7 3; }
.pk-graph .node .badge text { fill: #fff; font-size: 9px; font-weight: bold; }
.pk-graph .node.not-reached .badge rect { fill: var(--hairline-color, #bbb); }
.pk-graph .edge path { fill: none; stroke: var(--body-quiet-color, #888); stroke-width: 1.3; }
.pk-graph .edge.taken path { stroke: var(--body-fg, #333); stroke-width: 2.6; }
.pk-graph .edge.untaken path { stroke: var(--hairline-color, #ccc); stroke-dasharray: 4 4;
  stroke-width: 1.2; }
.pk-graph .edge.untaken text { fill: var(--hairline-color, #bbb); }
.pk-graph .edge.on_error path { stroke-dasharray: 2 3; }
.pk-graph .rerun text { fill: var(--link-fg, #447e9b); font-size: 10px; }
.pk-graph .edge text { fill: var(--body-quiet-color, #666); font-size: 11px; }
.pk-graph .edge.taken text { fill: var(--body-fg, #333); font-weight: bold; }
.pk-graph a:hover .node > rect { stroke-width: 3.5; }
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


# --- drawing ---------------------------------------------------------------------------------


def _text(x: float, y: float, content: str, css: str = "", limit: int = 28) -> str:
    shown = content if len(content) <= limit else content[: limit - 1] + "…"
    klass = f' class="{css}"' if css else ""
    return f'<text x="{x:.0f}" y="{y:.0f}" text-anchor="middle"{klass}>{escape(shown)}</text>'


def _edge_path(layout: Layout, index: int) -> tuple[str, float, float] | None:
    """The path of edge ``index`` and its label's centre and baseline."""
    route = layout.routes.get(index)
    if route is None:
        return None
    label = route.label or (0.0, 0.0)
    return route.d(), label[0], label[1]


def _classes(node: dict[str, Any], state: NodeState | None, path: RunPath | None) -> str:
    classes = ["node", node["kind"]]
    if node["kind"] in MARKER_KINDS:
        classes.append("marker")
        if path is not None and node["id"] not in path.reached:
            classes.append("not-reached")
    elif path is not None:
        if state is not None:
            classes.append(state.status)
        else:
            classes.append("passed" if node["id"] in path.reached else "not-reached")
    return " ".join(classes)


def _badge(x: float, y: float, kind: str) -> str:
    """A tab on the node's top border naming what the engine does there."""
    text = BADGES[kind]
    width = 8 + 6 * len(text)
    return (f'<g class="badge {kind}"><rect x="{x + 8:.0f}" y="{y - 7:.0f}" width="{width}" '
            f'height="13" rx="6"/><text x="{x + 8 + width / 2:.0f}" y="{y + 3:.0f}" '
            f'text-anchor="middle">{escape(text)}</text></g>')


def _node(node: dict[str, Any], x: float, y: float, state: NodeState | None,
          path: RunPath | None) -> str:
    label = node_label(node)
    lines, tips = node_lines(node, state, overlaid=path is not None,
                             reached=path is not None and node["id"] in path.reached)
    tooltip = "\n".join([node_title(node), *tips])
    body = [f'<g class="{_classes(node, state, path)}" data-node="{escape(node["id"])}">',
            f"<title>{escape(tooltip)}</title>",
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8"/>']
    if node["kind"] in BADGES:
        body.append(_badge(x, y, node["kind"]))
    if len(lines) == 1 and len(lines[0]) > SUB_LIMIT and " · " in lines[0]:
        lines = lines[0].split(" · ", 1)  # wrapped rather than cut
    middle = x + NODE_W / 2
    # One line under the label, or two (a wait's time, a decision's note): never cut
    # silently, the tooltip has them in full.
    rows: list[float] = ([NODE_H / 2 + 5], [20.0, 37.0], [17.0, 31.0, 44.0])[min(len(lines), 2)]
    body.append(_text(middle, y + rows[0], label))
    for line, row in zip(lines, rows[1:], strict=False):
        body.append(_text(middle, y + row, line, "sub", limit=SUB_LIMIT))
    body.append("</g>")
    return "".join(body)


def _rerun_link(x: float, y: float, key: str, url: str) -> str:
    """A node's "rerun from here" link, in its bottom right corner."""
    return (f'<a href="{escape(url)}" class="rerun" data-rerun="{escape(key)}">'
            f"<title>Rerun from here</title>"
            f'<text x="{x + NODE_W - 6:.0f}" y="{y + NODE_H - 5:.0f}" text-anchor="end">'
            "rerun</text></a>")


def draw(layout: Layout, states: dict[str, NodeState] | None = None, *,
         title: str = "", path: RunPath | None = None,
         rerun_url: Callable[[str], str] | None = None, site: str = DEFAULT_SITE) -> str:
    """The SVG text: the layout, with the run's states and path when given.

    Args:
        layout: The definition version's layout.
        states: What the run did at each node (``graph_overlay.overlay``).
        title: The drawing's title.
        path: The edges the run took and the nodes it reached (``graph_overlay.run_path``);
            with ``states`` and without it, every edge is drawn untaken.
        rerun_url: The "rerun from here" link of a step key; each node the run reached
            gets one for its first step (a finished run, for an operator who may fork).
        site: The admin site whose run pages a child run's node links to.
    """
    if states is not None and path is None:
        path = RunPath(reached={n for n in states})
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pk-graph" role="img" '
             f'width="{layout.width}" height="{layout.height}" '
             f'viewBox="0 0 {layout.width} {layout.height}">',
             f"<title>{escape(title)}</title>" if title else "",
             f"<style>{STYLE}</style>",
             '<defs><marker id="pk-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
             'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" '
             'orient="auto-start-reverse">'
             '<path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>']
    for index, edge in enumerate(layout.edges):
        drawn = _edge_path(layout, index)
        if drawn is None:
            continue
        d, lx, ly = drawn
        classes = ["edge", edge.get("kind") or "next"]
        if path is not None:
            # Only what the run did is drawn taken; everything else is dashed and grey.
            classes.append("taken" if index in path.taken else "untaken")
        name = escape(f"{edge['source']}->{edge['target']}")
        parts.append(f'<g class="{" ".join(classes)}" data-edge="{name}"><path d="{d}" '
                     'marker-end="url(#pk-arrow)"/>')
        if edge.get("label"):
            parts.append(_text(lx, ly, str(edge["label"]), limit=EDGE_LABEL_LIMIT))
        parts.append("</g>")
    for node in layout.nodes:
        x, y = layout.position[node["id"]]
        state = (states or {}).get(node["id"])
        body = _node(node, x, y, state, path)
        if state is not None and state.child_run:
            url = console_url(site, "workflowrun_change", state.child_run)
            parts.append(f'<a href="{escape(url)}" class="child-run">{body}</a>')
        elif state is not None and state.keys:
            anchor = step_anchor(state.keys[0])
            parts.append(f'<a href="#{anchor}">{body}</a>')
        else:
            parts.append(body)
        if rerun_url is not None and state is not None and state.keys:
            parts.append(_rerun_link(x, y, state.keys[0], rerun_url(state.keys[0])))
    parts.append("</svg>")
    return "".join(p for p in parts if p)


def definition_svg(definition: Any) -> str:
    """The SVG of a registered workflow definition (DSL or graph), no run."""
    graph = definition.analysis.graph
    layout = layout_for(definition.name, definition.graph_hash, graph)
    return draw(layout, title=f"{definition.name} ({definition.graph_hash})")


def run_svg(run: WorkflowRun, steps: list[WorkflowStep] | None = None, *,
            rerun_url: Callable[[str], str] | None = None, site: str = DEFAULT_SITE) -> str:
    """The SVG of the run's definition version with the run laid over it (the steps'
    ``OVERLAY_FIELDS`` are read, with one more query for the deciders' usernames when a
    gate was decided); ``rerun_url`` and ``site``: see ``draw``."""
    graph = run_graph(run)
    if graph is None:
        return ""
    if steps is None:
        steps = list(WorkflowStep.objects.filter(run=run).only(*OVERLAY_FIELDS))
    layout = layout_for(run.workflow, run.graph_hash or "", graph)
    states = overlay(graph, steps, run_status=run.status)
    name_deciders(states)
    path = run_path(graph, steps, graph_run=is_graph_run(run.workflow, run.graph_hash),
                    run_status=run.status)
    states.update(aggregate(graph, states, path))
    title = f"{run.workflow} run {run.pk}: {run.status}"
    return draw(layout, states, title=title, path=path, rerun_url=rerun_url, site=site)


__all__ = ["OVERLAY_FIELDS", "NodeState", "definition_svg", "overlay", "run_svg",
           "step_anchor"]
