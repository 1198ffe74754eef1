"""Seeded random workflow graphs, and the geometry of a drawn SVG graph read back from it."""

from __future__ import annotations

import itertools
import random
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

SVG = "{http://www.w3.org/2000/svg}"
SEED = 24
#: A label's character width and line height, as fractions of its font size: the same
#: generous estimate for sans-serif text that the layout uses.
CHAR_WIDTH, ASCENT, DESCENT = 0.62, 0.82, 0.25
EDGE_FONT = 11.0

# --- the corpus -------------------------------------------------------------------------------


def random_graph(rng: random.Random, name: str) -> dict[str, Any]:
    """A workflow-like graph: layers of steps from ``start`` to ``end`` with skip edges,
    fan-out, fan-in, keyed branches (labelled edges), loops back and self-loops."""
    depth = rng.randint(2, 8)
    layers: list[list[str]] = []
    count = 0
    for _ in range(depth):
        width = rng.choice([1, 1, 1, 2, 2, 3, 4])
        layers.append([f"n{count + i}" for i in range(width)])
        count += width
    nodes = [{"id": "start", "kind": "start", "label": "start"}]
    for row in layers:
        for node in row:
            kind = rng.choice(["step", "step", "step", "branch", "sleep", "parallel"])
            label = f"{kind} {node}" + " long name" * rng.randint(0, 2)
            nodes.append({"id": node, "kind": kind, "label": label})
    nodes.append({"id": "end", "kind": "end", "label": "end"})
    if rng.random() < 0.2:  # declared out of order
        middle = nodes[1:-1]
        rng.shuffle(middle)
        nodes[1:-1] = middle
    edges: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()

    def add(source: str, target: str, kind: str = "next", label: str | None = None) -> None:
        if (source, target) in seen:
            return
        seen.add((source, target))
        edge: dict[str, Any] = {"source": source, "target": target, "kind": kind}
        if label:
            edge["label"] = label
        edges.append(edge)

    for node in layers[0]:
        add("start", node)
    for index, row in enumerate(layers):
        below = layers[index + 1] if index + 1 < len(layers) else ["end"]
        for node in row:
            fan = rng.choice([1, 1, 2, 3])
            targets = rng.sample(below, min(fan, len(below)))
            keyed = fan > 1 and rng.random() < 0.5
            for number, target in enumerate(targets):
                add(node, target, "branch" if keyed else "next",
                    rng.choice(["yes", "no", "approved", "rejected", "retry later",
                                f"key {number}", "amount > 1000"]) if keyed else None)
            if rng.random() < 0.3 and index + 2 < len(layers):  # a skip edge
                skip = rng.choice(layers[rng.randint(index + 2, len(layers) - 1)])
                add(node, skip, "branch", "else" if rng.random() < 0.5 else None)
            if rng.random() < 0.15:
                add(node, "end", "on_error", "on error")
        for node in below:  # everyone has a way in
            if node != "end" and not any(e["target"] == node for e in edges):
                add(rng.choice(row), node)
    for index, row in enumerate(layers):
        for node in row:
            if rng.random() < 0.12 and index:  # a loop back
                target = rng.choice(layers[rng.randint(0, index - 1)])
                add(node, target, "loop", rng.choice(["again", None]))
            if rng.random() < 0.05:
                add(node, node, "loop", "again")
    for row in layers:
        for node in row:
            if not any(e["source"] == node and e["kind"] != "loop" for e in edges):
                add(node, "end")
    return {"name": name, "nodes": nodes, "edges": edges}


def corpus(count: int = 200, seed: int = SEED) -> list[dict[str, Any]]:
    """``count`` random graphs from ``seed``: the same ones on every machine."""
    rng = random.Random(seed)
    return [random_graph(rng, f"random_{index}") for index in range(count)]


# --- reading a drawing back -------------------------------------------------------------------

Box = tuple[float, float, float, float]  # left, top, right, bottom
Point = tuple[float, float]


@dataclass
class Edge:
    name: str
    curves: list[list[Point]]  # each path command's sampled points, start included
    labels: list[tuple[str, Box]] = field(default_factory=list)

    @property
    def points(self) -> list[Point]:
        out: list[Point] = []
        for curve in self.curves:
            out.extend(curve if not out else curve[1:])
        return out


@dataclass
class Geometry:
    nodes: dict[str, Box]
    edges: list[Edge]
    width: float = 0.0
    height: float = 0.0


_NUMBER = re.compile(r"[A-Za-z]|-?\d+(?:\.\d+)?")


def sample_path(d: str, steps: int = 16) -> list[list[Point]]:
    """The pieces of an SVG path of M, L and C commands (absolute): lines exactly, cubic
    curves sampled at ``steps`` points."""
    tokens = _NUMBER.findall(d)
    pieces: list[list[Point]] = []
    at: Point = (0.0, 0.0)
    i = 0
    while i < len(tokens):
        command = tokens[i]
        i += 1
        size = {"M": 2, "L": 2, "C": 6}[command]
        values = [float(v) for v in tokens[i:i + size]]
        i += size
        if command == "M":
            at = (values[0], values[1])
        elif command == "L":
            pieces.append([at, (values[0], values[1])])
            at = (values[0], values[1])
        else:
            p1, p2, p3 = (values[0], values[1]), (values[2], values[3]), (values[4], values[5])
            curve = []
            for k in range(steps + 1):
                t = k / steps
                a, b, c, e = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t ** 2, t ** 3
                curve.append((a * at[0] + b * p1[0] + c * p2[0] + e * p3[0],
                              a * at[1] + b * p1[1] + c * p2[1] + e * p3[1]))
            pieces.append(curve)
            at = p3
    return pieces


def text_box(text: str, x: float, y: float, font: float = EDGE_FONT) -> Box:
    half = len(text) * CHAR_WIDTH * font / 2
    return (x - half, y - ASCENT * font, x + half, y + DESCENT * font)


def read(svg: str) -> Geometry:
    """The node boxes, edge paths and edge label boxes of a drawn graph."""
    root = ET.fromstring(svg)
    nodes: dict[str, Box] = {}
    edges: list[Edge] = []
    for group in root.iter(f"{SVG}g"):
        if "data-node" in group.attrib:
            rect = group.find(f"{SVG}rect")
            assert rect is not None
            x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
            nodes[group.attrib["data-node"]] = (x, y, x + float(rect.get("width", 0)),
                                                y + float(rect.get("height", 0)))
        elif "data-edge" in group.attrib:
            path = group.find(f"{SVG}path")
            assert path is not None
            edge = Edge(group.attrib["data-edge"], sample_path(path.get("d", "")))
            for text in group.findall(f"{SVG}text"):
                assert text.get("text-anchor") == "middle"
                edge.labels.append((text.text or "", text_box(
                    text.text or "", float(text.get("x", 0)), float(text.get("y", 0)))))
            edges.append(edge)
    _, _, width, height = (float(v) for v in root.get("viewBox", "0 0 0 0").split())
    return Geometry(nodes, edges, width, height)


def _inside(point: Point, box: Box, shrink: float) -> bool:
    return box[0] + shrink < point[0] < box[2] - shrink and \
        box[1] + shrink < point[1] < box[3] - shrink


def _segment_enters(a: Point, b: Point, box: Box, shrink: float) -> bool:
    """Whether segment ab passes through the box shrunk by ``shrink`` (Liang-Barsky)."""
    left, top, right, bottom = box[0] + shrink, box[1] + shrink, box[2] - shrink, \
        box[3] - shrink
    t0, t1 = 0.0, 1.0
    dx, dy = b[0] - a[0], b[1] - a[1]
    for p, q in ((-dx, a[0] - left), (dx, right - a[0]), (-dy, a[1] - top),
                 (dy, bottom - a[1])):
        if p == 0:
            if q < 0:
                return False
            continue
        r = q / p
        if p < 0:
            t0 = max(t0, r)
        else:
            t1 = min(t1, r)
        if t0 > t1:
            return False
    return t1 - t0 > 1e-9


def _within(box: Box, frame: Box) -> bool:
    return frame[0] <= box[0] and frame[1] <= box[1] and box[2] <= frame[2] and \
        box[3] <= frame[3]


def _overlap(a: Box, b: Box, slack: float = 0.0) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and \
        b[1] < a[3] - slack


def problems(svg: str, shrink: float = 1.5) -> list[str]:
    """What the drawing gets wrong: an edge through a node that is not one of its ends, a
    label on a node, two nodes overlapping, an edge or node missing its data attribute."""
    geometry = read(svg)
    found = []
    frame = (0.0, 0.0, geometry.width, geometry.height)
    for node, box in geometry.nodes.items():
        if not _within(box, frame):
            found.append(f"node {node!r} is cut by the drawing's edge")
    for edge in geometry.edges:
        if not all(_within((x, y, x, y), frame) for x, y in edge.points):
            found.append(f"edge {edge.name!r} leaves the drawing")
        for text, label in edge.labels:
            if not _within(label, frame):
                found.append(f"label {text!r} of edge {edge.name!r} is cut by the drawing's edge")
    names = list(geometry.nodes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if _overlap(geometry.nodes[a], geometry.nodes[b]):
                found.append(f"nodes {a!r} and {b!r} overlap")
    for edge in geometry.edges:
        source, _, target = edge.name.partition("->")
        ends = {source, target}
        points = edge.points
        for node, box in geometry.nodes.items():
            if node in ends:
                continue
            for a, b in itertools.pairwise(points):
                if _segment_enters(a, b, box, shrink):
                    found.append(f"edge {edge.name!r} passes through node {node!r}")
                    break
        for text, label in edge.labels:
            for node, box in geometry.nodes.items():
                if _overlap(label, box):
                    found.append(f"label {text!r} of edge {edge.name!r} is on node {node!r}")
    return found


def crossings(lines: list[tuple[str, str, list[Point]]], cell: float = 48.0) -> int:
    """How many times edges cross, over pairs of edges that share no end node.

    Args:
        lines: ``(source, target, polyline)`` per edge.
        cell: The grid size that spares comparing far-apart segments.
    """
    segments: list[tuple[int, Point, Point]] = []
    for index, (_, _, points) in enumerate(lines):
        segments += [(index, a, b) for a, b in itertools.pairwise(points)
                     if a != b]
    grid: dict[tuple[int, int], list[int]] = {}
    for number, (_, a, b) in enumerate(segments):
        for gx in range(int(min(a[0], b[0]) // cell), int(max(a[0], b[0]) // cell) + 1):
            for gy in range(int(min(a[1], b[1]) // cell), int(max(a[1], b[1]) // cell) + 1):
                grid.setdefault((gx, gy), []).append(number)
    found: set[tuple[int, int]] = set()
    for members in grid.values():
        for i, first in enumerate(members):
            e1, a, b = segments[first]
            for second in members[i + 1:]:
                e2, c, d = segments[second]
                if e1 == e2 or (first, second) in found:
                    continue
                s1, t1 = lines[e1][:2]
                s2, t2 = lines[e2][:2]
                if {s1, t1} & {s2, t2}:
                    continue
                if _proper_cross(a, b, c, d):
                    found.add((first, second))
    return len(found)


def _proper_cross(a: Point, b: Point, c: Point, d: Point) -> bool:
    def orient(p: Point, q: Point, r: Point) -> float:
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    o1, o2 = orient(a, b, c), orient(a, b, d)
    o3, o4 = orient(c, d, a), orient(c, d, b)
    # Half-open at the segments' ends, so that a crossing at a sample point counts once.
    return ((o1 > 0) != (o2 > 0)) and ((o3 > 0) != (o4 > 0)) and o1 * o2 <= 0 \
        and o3 * o4 <= 0 and not (o1 == 0 and o2 == 0)


def svg_crossings(svg: str) -> int:
    """The edge crossings of a drawn graph."""
    geometry = read(svg)
    lines = []
    for edge in geometry.edges:
        source, _, target = edge.name.partition("->")
        lines.append((source, target, edge.points))
    return crossings(lines)


def big_graph(size: int = 300, seed: int = SEED) -> dict[str, Any]:
    """A workflow-like graph of ``size`` nodes (start and end included): about twenty
    layers, each node with one to three edges down, some skip edges and loops back."""
    rng = random.Random(seed)
    ids = [f"s{i}" for i in range(size - 2)]
    layers: list[list[str]] = []
    at = 0
    while at < len(ids):
        width = rng.randint(8, 20)
        layers.append(ids[at:at + width])
        at += width
    nodes = [{"id": "start", "kind": "start", "label": "start"}]
    nodes += [{"id": i, "kind": "step", "label": f"Step {i}"} for i in ids]
    nodes.append({"id": "end", "kind": "end", "label": "end"})
    edges = [{"source": "start", "target": n, "kind": "next"} for n in layers[0]]
    pairs = set()
    for index, row in enumerate(layers):
        below = layers[index + 1] if index + 1 < len(layers) else ["end"]
        for node in row:
            for target in rng.sample(below, min(len(below), rng.choice([1, 1, 2, 3]))):
                pairs.add((node, target, "next"))
            if rng.random() < 0.1 and index + 2 < len(layers):
                pairs.add((node, rng.choice(layers[rng.randint(index + 2, len(layers) - 1)]),
                           "branch"))
            if rng.random() < 0.03 and index:
                pairs.add((node, rng.choice(layers[rng.randint(0, index - 1)]), "loop"))
        for target in below:
            if target != "end" and not any(p[1] == target for p in pairs):
                pairs.add((rng.choice(row), target, "next"))
    edges += [{"source": s, "target": t, "kind": k} for s, t, k in sorted(pairs)]
    return {"name": f"big_{size}", "nodes": nodes, "edges": edges}
