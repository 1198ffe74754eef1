"""A layered (Sugiyama) layout of a directed graph: boxes, edge paths and label places.

Pure Python and independent of Django, so that it can be tested and benchmarked alone.
The steps are the classic ones: cycle removal (the back edges of a depth-first walk are
reversed, then drawn up the right-hand side of their ends), layering (longest path, then
nodes pulled towards the side where more of their edges are), dummy nodes so that every
edge spans one layer, crossing reduction (weighted-median sweeps down and up with
adjacent exchanges, the best order kept), x coordinates by a weighted least-squares
placement under separation constraints (long edges stay straight: their dummies weigh
most), then edge paths through the dummies' places and labels in free space.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

#: Path commands: ("M", x, y), ("L", x, y), ("C", x1, y1, x2, y2, x, y).
Command = tuple[object, ...]

#: How many neighbour comparisons sifting may make (bounds the time on big graphs).
SIFT_BUDGET = 60_000
#: Up to how many items (nodes and dummies) crossing reduction tries a second start.
SECOND_START_ITEMS = 600
#: Width of a label's character, as a fraction of its font size (generous for sans-serif).
CHAR_WIDTH = 0.62
#: Ascent and descent of a label line, as fractions of its font size.
ASCENT, DESCENT = 0.82, 0.25


def label_box(text: str, x: float, baseline: float,
              font_size: float) -> tuple[float, float, float, float]:
    """The box ``(left, top, right, bottom)`` a centred label of ``text`` takes.

    Args:
        text: The label as shown.
        x: Its centre (``text-anchor="middle"``).
        baseline: The ``y`` of its baseline.
        font_size: Its font size in pixels.
    """
    half = len(text) * CHAR_WIDTH * font_size / 2
    return (x - half, baseline - ASCENT * font_size, x + half, baseline + DESCENT * font_size)


@dataclass(frozen=True)
class Sizes:
    """The measures of a drawing, in pixels."""

    node_w: int = 190
    node_h: int = 50
    gap_x: int = 40  # between two nodes of a layer
    gap_y: int = 54  # between two layers
    margin: int = 24
    dummy_gap: int = 16  # between two edges passing through a layer
    node_dummy_gap: int = 24  # between a node and an edge passing beside it
    lane: int = 14  # the width of a lane of a back edge, right of its node
    label_font: int = 11


@dataclass
class Route:
    """How one edge is drawn: its path and where its label goes."""

    source: str
    target: str
    commands: list[Command]
    label: tuple[float, float] | None = None  # centre x, baseline y
    back: bool = False  # drawn up the side: a back edge or a self-loop
    _d: str = field(default="", repr=False, compare=False)

    def d(self) -> str:
        """The SVG path data (formatted once: the layout is cached, drawn per request)."""
        if not self._d:
            out = []
            for command in self.commands:
                numbers = " ".join(f"{v:.1f}".removesuffix(".0") for v in command[1:]
                                   if isinstance(v, float | int))
                out.append(f"{command[0]}{numbers}")
            self._d = " ".join(out)
        return self._d


@dataclass
class Drawing:
    """The result: top-left corners of the nodes, a route per drawable edge, the size."""

    position: dict[str, tuple[int, int]]
    routes: dict[int, Route]
    width: int
    height: int
    layers: list[list[str]] = field(default_factory=list)
    crossings: int = 0


# --- 1. cycle removal ------------------------------------------------------------------


def _back_edges(ids: list[str], edges: list[tuple[str, str]],
                loops: Collection[int] = ()) -> set[int]:
    """Indexes of the edges to reverse so that the rest has no cycle.

    The back edges of a depth-first walk from the sources (declared order) over the edges
    not in ``loops``; then each edge in ``loops`` (declared loop edges: the way back to a
    loop's head, or into its body) is reversed if and only if it closes a cycle.
    """
    outgoing: dict[str, list[int]] = defaultdict(list)
    has_incoming = set()
    for index, (source, target) in enumerate(edges):
        if index not in loops:
            outgoing[source].append(index)
            if source != target:
                has_incoming.add(target)
    back: set[int] = set()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    roots = [n for n in ids if n not in has_incoming] + ids
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(outgoing[root]))]
        while stack:
            node, pending = stack[-1]
            for index in pending:
                target = edges[index][1]
                if state.get(target) == 1:
                    back.add(index)
                elif target not in state:
                    state[target] = 1
                    stack.append((target, iter(outgoing[target])))
                    break
            else:
                state[node] = 2
                stack.pop()
    if not loops:
        return back
    forward: dict[str, set[str]] = defaultdict(set)
    for index, (source, target) in enumerate(edges):
        if index not in loops:
            a, b = (target, source) if index in back else (source, target)
            forward[a].add(b)
    for index in sorted(loops):
        source, target = edges[index]
        # Does the target already lead to the source? Then this edge closes a cycle.
        seen, frontier = {target}, [target]
        while frontier and source not in seen:
            for nxt in forward[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        if source in seen:
            back.add(index)
            forward[target].add(source)
        else:
            forward[source].add(target)
    return back


# --- 2. layering ------------------------------------------------------------------------


def _layers(ids: list[str], dag: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layers, then nodes moved towards the side with more of their edges."""
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    indegree = dict.fromkeys(ids, 0)
    for source, target in dag:
        preds[target].append(source)
        succs[source].append(target)
        indegree[target] += 1
    order = []
    ready = [n for n in ids if indegree[n] == 0]
    ready.reverse()
    while ready:
        node = ready.pop()
        order.append(node)
        for target in reversed(succs[node]):
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    layer: dict[str, int] = {}
    for node in order:
        layer[node] = 1 + max((layer[p] for p in preds[node]), default=-1)
    # A node with more edges below than above sits as low as its successors allow (and the
    # converse): this shortens edges as network simplex would, in a few passes.
    for _ in range(4):
        moved = False
        for node in reversed(order):
            low = min((layer[s] for s in succs[node]), default=None)
            if low is None:
                continue
            if len(succs[node]) > len(preds[node]) and low - 1 > layer[node]:
                layer[node] = low - 1
                moved = True
        for node in order:
            high = max((layer[p] for p in preds[node]), default=None)
            if high is None:
                continue
            if len(preds[node]) > len(succs[node]) and high + 1 < layer[node]:
                layer[node] = high + 1
                moved = True
        if not moved:
            break
    return layer


# --- 3./4. dummies and crossing reduction --------------------------------------------------


def _bilayer_crossings(upper: Sequence[int], pos: Sequence[int], down: list[list[int]],
                       width: int) -> int:
    """Crossings between a layer (its items ``upper``, left to right) and the next one."""
    tree = [0] * (width + 1)
    total = 0
    seen = 0
    for item in upper:
        targets = sorted(pos[t] for t in down[item])
        for p in targets:
            # edges already seen that end right of p cross this one
            i, before = p + 1, 0
            while i > 0:
                before += tree[i]
                i -= i & -i
            total += seen - before
        for p in targets:
            i = p + 1
            while i <= width:
                tree[i] += 1
                i += i & -i
            seen += 1
    return total


def _median(values: list[int]) -> float:
    values.sort()
    size = len(values)
    middle = size // 2
    if size % 2:
        return float(values[middle])
    if size == 2:
        return (values[0] + values[1]) / 2
    left = values[middle - 1] - values[0]
    right = values[-1] - values[middle]
    if left + right == 0:
        return (values[middle - 1] + values[middle]) / 2
    return (values[middle - 1] * right + values[middle] * left) / (left + right)


class _Order:
    """Items (nodes and dummies, as ints) in layers, with their neighbours."""

    def __init__(self, layers: list[list[int]], up: list[list[int]], down: list[list[int]]):
        self.layers = layers
        self.up = up
        self.down = down
        self.pos = [0] * len(up)
        for row in layers:
            self._index(row)

    def _index(self, row: list[int]) -> None:
        for index, item in enumerate(row):
            self.pos[item] = index

    def crossings(self) -> int:
        pos = self.pos
        return sum(_bilayer_crossings(self.layers[i], pos, self.down,
                                      len(self.layers[i + 1]))
                   for i in range(len(self.layers) - 1))

    def sort(self, index: int, downward: bool) -> None:
        row = self.layers[index]
        neighbours = self.up if downward else self.down
        pos = self.pos
        keys: list[float] = []
        for item in row:
            adjacent = neighbours[item]
            keys.append(_median([pos[n] for n in adjacent]) if adjacent else -1.0)
        movable = sorted((k, pos[item], item) for k, item in zip(keys, row, strict=True)
                         if k >= 0)
        if not movable:
            return
        moved = iter(movable)
        row[:] = [item if k < 0 else next(moved)[2] for k, item in zip(keys, row, strict=True)]
        self._index(row)

    def _pair(self, v: int, w: int) -> tuple[int, int]:
        """Crossings among the edges of v and w: with v left of w, and with w left of v."""
        pos = self.pos
        left = right = 0
        for side in (self.up, self.down):
            ws = side[w]
            if not ws:
                continue
            for a in side[v]:
                pa = pos[a]
                for b in ws:
                    pb = pos[b]
                    if pa > pb:
                        left += 1
                    elif pa < pb:
                        right += 1
        return left, right

    def transpose(self, rounds: int = 4, ties: bool = False) -> None:
        """Swap neighbours while that removes crossings (``ties``: or keeps as many)."""
        for _ in range(rounds):
            improved = False
            for row in self.layers:
                for i in range(len(row) - 1):
                    v, w = row[i], row[i + 1]
                    as_is, swapped = self._pair(v, w)
                    if swapped < as_is or (ties and swapped == as_is and as_is):
                        row[i], row[i + 1] = w, v
                        self.pos[v], self.pos[w] = i + 1, i
                        improved = improved or swapped < as_is
            if not improved:
                return

    def sift(self, budget: int) -> int:
        """Move each item to the place in its layer with the fewest crossings (sifting),
        while the pair comparisons made stay within ``budget``; what is left of it."""
        for row in self.layers:
            for v in sorted(row, key=lambda item: -len(self.up[item]) - len(self.down[item])):
                if budget < len(row):
                    return budget
                budget -= len(row)
                row.remove(v)
                best_at, best_delta, delta = 0, 0, 0
                for k, w in enumerate(row):
                    as_is, swapped = self._pair(v, w)  # v left of w, right of w
                    delta += swapped - as_is
                    if delta < best_delta:
                        best_at, best_delta = k + 1, delta
                row.insert(best_at, v)
                self._index(row)
        return budget

    def snapshot(self) -> list[list[int]]:
        return [list(row) for row in self.layers]

    def restore(self, layers: list[list[int]]) -> None:
        self.layers = [list(row) for row in layers]
        for row in self.layers:
            self._index(row)


def _reduce_crossings(order: _Order, iterations: int, budget: int) -> int:
    """Median sweeps with transposition, the best order kept, then sifting rounds."""
    best = order.snapshot()
    best_count = order.crossings()
    stale = 0
    for iteration in range(iterations):
        if best_count == 0:
            break
        downward = iteration % 2 == 0
        indexes = range(1, len(order.layers)) if downward else \
            range(len(order.layers) - 2, -1, -1)
        for index in indexes:
            order.sort(index, downward)
        order.transpose(ties=iteration % 4 >= 2)
        count = order.crossings()
        if count < best_count:
            best, best_count, stale = order.snapshot(), count, 0
        else:
            stale += 1
            if stale >= 6:
                break
    order.restore(best)
    while best_count and budget > 0:
        budget = order.sift(budget)
        order.transpose()
        count = order.crossings()
        if count >= best_count:
            order.restore(best)
            break
        best, best_count = order.snapshot(), count
    return best_count


def _walk_order(nodes: int, item_layer: list[int], depth: int, onward: list[list[int]],
                from_bottom: bool = False) -> list[list[int]]:
    """An initial order: a depth-first walk from the top (or the bottom), nodes taken in
    declaration order, each layer filled left to right as the walk reaches it."""
    rows: list[list[int]] = [[] for _ in range(depth)]
    visited = [False] * len(item_layer)
    sign = -1 if from_bottom else 1
    for start in sorted(range(nodes), key=lambda n: (sign * item_layer[n], n)):
        if visited[start]:
            continue
        stack = [start]
        while stack:
            item = stack.pop()
            if visited[item]:
                continue
            visited[item] = True
            rows[item_layer[item]].append(item)
            stack.extend(reversed(onward[item]))
    return rows


# --- 5. x coordinates ---------------------------------------------------------------------


def _place_row(targets: list[float], weights: list[float], gaps: list[float]) -> list[float]:
    """Positions closest to ``targets`` (weighted least squares) with ``x[i+1] - x[i] >=
    gaps[i]``: pool-adjacent-violators on the targets shifted by the cumulative gaps."""
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    blocks: list[list[float]] = []  # [weight, weighted sum, count]
    for target, weight, offset in zip(targets, weights, offsets, strict=True):
        blocks.append([weight, weight * (target - offset), 1])
        while len(blocks) > 1 and \
                blocks[-2][1] / blocks[-2][0] > blocks[-1][1] / blocks[-1][0]:
            w, s, c = blocks.pop()
            blocks[-1][0] += w
            blocks[-1][1] += s
            blocks[-1][2] += c
    out: list[float] = []
    for weight, total, count in blocks:
        value = total / weight
        out.extend([value] * int(count))
    return [value + offset for value, offset in zip(out, offsets, strict=True)]


# --- the whole layout -----------------------------------------------------------------------


def layout(ids: Sequence[str], edges: Sequence[tuple[str, str]],
           labels: Sequence[str | None] = (), sizes: Sizes | None = None, *,
           loops: Collection[int] = (), iterations: int = 24) -> Drawing:
    """Lay out a directed graph top to bottom.

    Args:
        ids: The node ids, in declaration order (which breaks ties).
        edges: ``(source, target)`` pairs; edges to unknown nodes are not drawn.
        labels: Each edge's label as shown (or None), to find it a free place.
        sizes: The measures of the drawing.
        loops: Indexes of the edges declared as loops: reversed only if they close a cycle.
        iterations: The most crossing-reduction sweeps.

    Returns:
        The drawing: node corners, a route per drawn edge (by edge index), the size.
    """
    sizes = sizes or Sizes()
    ids = list(dict.fromkeys(ids))
    known = set(ids)
    drawn = [i for i, (s, t) in enumerate(edges) if s in known and t in known]
    pairs = [(edges[i][0], edges[i][1]) for i in drawn]
    declared = set(loops)
    hinted = {k for k, i in enumerate(drawn) if i in declared}
    back = {drawn[i] for i in _back_edges(ids, pairs, hinted)}
    dag = []
    for i in drawn:
        source, target = edges[i]
        if source == target:
            continue
        dag.append((target, source) if i in back else (source, target))
    layer_of = _layers(ids, dag)

    # Items: nodes first, then the dummies of each edge's chain (top to bottom).
    item_of = {node: index for index, node in enumerate(ids)}
    item_layer = [layer_of[n] for n in ids]
    chains: dict[int, list[int]] = {}
    for i in drawn:
        source, target = edges[i]
        if source == target:
            continue
        top, bottom = (target, source) if i in back else (source, target)
        chain = [item_of[top]]
        for lay in range(layer_of[top] + 1, layer_of[bottom]):
            chain.append(len(item_layer))
            item_layer.append(lay)
        chain.append(item_of[bottom])
        chains[i] = chain
    count = len(item_layer)
    up: list[list[int]] = [[] for _ in range(count)]
    down: list[list[int]] = [[] for _ in range(count)]
    for chain in chains.values():
        for a, b in itertools.pairwise(chain):
            down[a].append(b)
            up[b].append(a)
    depth = max(item_layer, default=-1) + 1
    order = _Order(_walk_order(len(ids), item_layer, depth, down), up, down)
    crossings = _reduce_crossings(order, iterations, budget=SIFT_BUDGET)
    if crossings and count <= SECOND_START_ITEMS:
        # A second start, walking up from the bottom: small graphs can afford it.
        other = _Order(_walk_order(len(ids), item_layer, depth, up, from_bottom=True), up,
                       down)
        other_crossings = _reduce_crossings(other, iterations, budget=SIFT_BUDGET)
        if other_crossings < crossings:
            order, crossings = other, other_crossings

    # Lanes: the back edges and self-loops of a node run right of it, one lane each.
    lanes: dict[int, list[int]] = defaultdict(list)  # node item -> edge indexes
    for i in drawn:
        source, target = edges[i]
        if i in back:
            lanes[item_of[source]].append(i)
            if source != target:
                lanes[item_of[target]].append(i)
    half = sizes.node_w / 2

    def extent(item: int) -> tuple[float, float]:
        if item >= len(ids):
            return 0.0, 0.0
        return half, half + (sizes.lane * len(lanes[item]) + 6 if lanes[item] else 0)

    def gap(a: int, b: int) -> float:
        real = (a < len(ids)) + (b < len(ids))
        between = (sizes.dummy_gap, sizes.node_dummy_gap, sizes.gap_x)[real]
        return extent(a)[1] + between + extent(b)[0]

    x = [0.0] * count
    for row in order.layers:
        at = 0.0
        for index, item in enumerate(row):
            if index:
                at += gap(row[index - 1], item)
            x[item] = at

    def weight(a: int, b: int) -> float:
        dummies = (a >= len(ids)) + (b >= len(ids))
        return (1.0, 2.0, 8.0)[dummies]

    # A back edge leaves and enters its nodes by their lanes: its first and last dummies
    # aim at the lanes, and it does not pull its nodes.
    aim: dict[tuple[int, int], float] = {}
    ignored: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for i in back:
        if i not in chains:  # a self-loop
            continue
        chain = chains[i]
        upper, lower = chain[0], chain[-1]
        ignored[upper][chain[1]] += 1
        ignored[lower][chain[-2]] += 1
        if len(chain) > 2:
            aim[(chain[1], upper)] = half + 6 + sizes.lane * (lanes[upper].index(i) + 0.5)
            aim[(chain[-2], lower)] = half + 6 + sizes.lane * (lanes[lower].index(i) + 0.5)

    def place(row: list[int], sides: tuple[list[list[int]], ...]) -> None:
        targets, weights = [], []
        for item in row:
            total = sum_w = 0.0
            skip = dict(ignored[item]) if item in ignored else None
            for side in sides:
                for n in side[item]:
                    if skip and skip.get(n):
                        skip[n] -= 1
                        continue
                    w = weight(item, n)
                    total += w * (x[n] + aim.get((item, n), 0.0))
                    sum_w += w
            if sum_w:
                targets.append(total / sum_w)
                weights.append(sum_w)
            else:
                targets.append(x[item])
                weights.append(0.05)
        gaps = [gap(a, b) for a, b in itertools.pairwise(row)]
        for item, value in zip(row, _place_row(targets, weights, gaps), strict=True):
            x[item] = value

    for _ in range(6):
        for row in order.layers[1:]:
            place(row, (up,))
        for row in reversed(order.layers[:-1]):
            place(row, (down,))
    for row in order.layers[1:]:
        place(row, (up,))

    left = min((x[item] - extent(item)[0] for item in range(count)), default=0.0)
    shift = sizes.margin - left
    xi = [round(v + shift) for v in x]
    row_y = [sizes.margin + lay * (sizes.node_h + sizes.gap_y) for lay in range(depth)]
    position = {node: (xi[item_of[node]] - sizes.node_w // 2, row_y[layer_of[node]])
                for node in ids}
    routes = _routes(item_of, edges, drawn, back, chains, lanes, xi, item_layer, row_y, sizes)
    right = max((xi[item] + extent(item)[1] for item in range(count)), default=0.0)
    lowest = row_y[-1] + sizes.node_h if row_y else 0
    width, height = int(right) + sizes.margin, lowest + sizes.margin
    boxes: list[Box] = [(px, py, px + sizes.node_w, py + sizes.node_h)
                        for px, py in position.values()]
    places = _Labels(routes, boxes, sizes) if any(labels) else None
    for i, route in routes.items():
        text = labels[i] if i < len(labels) else None
        if text and places is not None:
            route.label = places.place(route, text)
            box = label_box(text, *route.label, sizes.label_font)
            width = max(width, int(box[2]) + sizes.margin)
            height = max(height, int(box[3]) + sizes.margin)
    layers = [[ids[item] for item in row if item < len(ids)] for row in order.layers]
    return Drawing(position=position, routes=routes, width=width, height=height,
                   layers=layers, crossings=crossings)


def _routes(item_of: dict[str, int], edges: Sequence[tuple[str, str]], drawn: list[int],
            back: set[int], chains: dict[int, list[int]], lanes: dict[int, list[int]],
            xi: list[int], item_layer: list[int], row_y: list[int],
            sizes: Sizes) -> dict[int, Route]:
    w, h = sizes.node_w, sizes.node_h
    # Ports: the forward edges leave a node's bottom and enter its top spread out, in the
    # left-to-right order of their other ends, so that they do not cross at the node.
    out_ports: dict[int, list[tuple[int, int]]] = defaultdict(list)
    in_ports: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, chain in chains.items():
        if i not in back:
            out_ports[chain[0]].append((xi[chain[1]], i))
            in_ports[chain[-1]].append((xi[chain[-2]], i))
    port_x: dict[tuple[int, int], float] = {}
    for kind, ports in ((0, out_ports), (1, in_ports)):
        for item, ends in ports.items():
            ends.sort()
            step = min(18.0, (w - 40) / max(len(ends) - 1, 1))
            for k, (_, i) in enumerate(ends):
                port_x[(kind, i)] = xi[item] + (k - (len(ends) - 1) / 2) * step

    def lane_of(item: int, i: int) -> tuple[float, float]:
        """The lane's x and where the edge meets the node's right side."""
        index = lanes[item].index(i)
        lane_x = xi[item] + w / 2 + 6 + sizes.lane * (index + 0.5)
        side_y = row_y[item_layer[item]] + 10 + (h - 20) * (index + 1) / (len(lanes[item]) + 1)
        return lane_x, side_y

    routes: dict[int, Route] = {}
    for i in drawn:
        source, target = edges[i]
        if source == target:
            item = item_of[source]
            lane_x, _ = lane_of(item, i)
            top = row_y[item_layer[item]]
            side = xi[item] + w / 2
            routes[i] = Route(source, target, [
                ("M", side, top + 12.0), ("C", lane_x + 6, top + 8.0, lane_x + 6, top + h - 8.0,
                                          side, top + h - 12.0)], back=True)
            continue
        chain = chains[i]
        points: list[tuple[float, float]] = []  # (x at the row's top, x at its bottom)
        commands: list[Command]
        if i in back:
            # Drawn in its own direction, upwards: from the source's lane to the target's.
            lower, upper = chain[-1], chain[0]
            lx, ly = lane_of(lower, i)
            ux, uy = lane_of(upper, i)
            commands = [("M", xi[lower] + w / 2, ly), ("L", lx, ly),
                        ("L", lx, float(row_y[item_layer[lower]]))]
            points = [(lx, row_y[item_layer[lower]])]
            for item in reversed(chain[1:-1]):
                lay = item_layer[item]
                _curve(commands, points[-1], (xi[item], row_y[lay] + h))
                commands.append(("L", float(xi[item]), float(row_y[lay])))
                points.append((xi[item], row_y[lay]))
            _curve(commands, points[-1], (ux, row_y[item_layer[upper]] + h))
            commands += [("L", ux, uy), ("L", xi[upper] + w / 2, uy)]
        else:
            start = (port_x[(0, i)], float(row_y[item_layer[chain[0]]] + h))
            commands = [("M", *start)]
            last = start
            for item in chain[1:-1]:
                lay = item_layer[item]
                _curve(commands, last, (xi[item], row_y[lay]))
                commands.append(("L", float(xi[item]), float(row_y[lay] + h)))
                last = (xi[item], row_y[lay] + h)
            _curve(commands, last, (port_x[(1, i)], row_y[item_layer[chain[-1]]]))
        routes[i] = Route(source, target, commands, back=i in back)
    return routes


def _curve(commands: list[Command], a: tuple[float, float], b: tuple[float, float]) -> None:
    """A vertical S-curve from ``a`` to ``b``: it stays between their heights."""
    middle = (a[1] + b[1]) / 2
    commands.append(("C", float(a[0]), middle, float(b[0]), middle, float(b[0]), float(b[1])))


Box = tuple[float, float, float, float]


def _meets(box: Box, a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether segment ab meets the box (Liang-Barsky clipping)."""
    t0, t1 = 0.0, 1.0
    dx, dy = b[0] - a[0], b[1] - a[1]
    for p, q in ((-dx, a[0] - box[0]), (dx, box[2] - a[0]), (-dy, a[1] - box[1]),
                 (dy, box[3] - a[1])):
        if p == 0:
            if q < 0:
                return False
        elif p < 0:
            t0 = max(t0, q / p)
        else:
            t1 = min(t1, q / p)
        if t0 > t1:
            return False
    return True


class _Labels:
    """Places labels beside their edges: never on a node, on another label only when
    nothing else is left, and crossing as few edge strokes as it can."""

    CELL = 40.0

    def __init__(self, routes: dict[int, Route], boxes: list[Box], sizes: Sizes):
        self.boxes = boxes
        self.sizes = sizes
        self.placed: list[Box] = []
        self.grid: dict[tuple[int, int], list[tuple[tuple[float, float],
                                                    tuple[float, float]]]] = defaultdict(list)
        for route in routes.values():
            for a, b in itertools.pairwise(_polyline(route.commands)):
                for cx in range(int(min(a[0], b[0]) // self.CELL),
                                int(max(a[0], b[0]) // self.CELL) + 1):
                    for cy in range(int(min(a[1], b[1]) // self.CELL),
                                    int(max(a[1], b[1]) // self.CELL) + 1):
                        self.grid[(cx, cy)].append((a, b))

    def strokes(self, box: Box) -> int:
        seen = set()
        for cx in range(int(box[0] // self.CELL), int(box[2] // self.CELL) + 1):
            for cy in range(int(box[1] // self.CELL), int(box[3] // self.CELL) + 1):
                for segment in self.grid.get((cx, cy), ()):
                    if segment not in seen and _meets(box, *segment):
                        seen.add(segment)
        return len(seen)

    @staticmethod
    def _clear(box: Box, others: list[Box], margin: float = 2.0) -> bool:
        return not any(box[0] < o[2] + margin and o[0] - margin < box[2] and
                       box[1] < o[3] + margin and o[1] - margin < box[3] for o in others)

    def place(self, route: Route, text: str) -> tuple[float, float]:
        """The label's centre and baseline."""
        sizes = self.sizes
        font = sizes.label_font
        half = len(text) * CHAR_WIDTH * font / 2
        lift = (ASCENT - DESCENT) * font / 2  # from the box's middle to its baseline
        candidates: list[tuple[float, float]] = []
        previous: tuple[float, float] | None = None
        for command in route.commands:
            end = (float(command[-2]), float(command[-1]))  # type: ignore[arg-type]
            if command[0] == "C" and previous is not None:
                # Along a curve between two layers: where no node is.
                for t in (0.5, 0.3, 0.7):
                    px = _bezier(previous[0], float(command[1]),  # type: ignore[arg-type]
                                 float(command[3]), end[0], t)  # type: ignore[arg-type]
                    py = _bezier(previous[1], float(command[2]),  # type: ignore[arg-type]
                                 float(command[4]), end[1], t)  # type: ignore[arg-type]
                    for dx in (half + 4, -half - 4):
                        for dy in (0.0, -7.0, 7.0):
                            candidates.append((px + dx, py + dy + lift))
            previous = end
        if route.back and not candidates:  # a self-loop: beside it, or above/below its node
            sx = float(route.commands[0][1])  # type: ignore[arg-type]
            sy = float(route.commands[0][2])  # type: ignore[arg-type]
            middle = sx - sizes.node_w / 2
            candidates += [(sx + sizes.lane + 10 + half, sy + 14 + lift),
                           (middle, sy - 12 - sizes.gap_y / 2 + lift),
                           (middle, sy - 12 + sizes.node_h + sizes.gap_y / 2 + lift)]
        best: tuple[int, int, int] | None = None
        chosen = candidates[0]
        for index, candidate in enumerate(candidates):
            box = label_box(text, *candidate, font)
            if box[0] < 1 or box[1] < 1 or not self._clear(box, self.boxes):
                continue  # on a node, or cut by the drawing's left or top edge
            score = (0 if self._clear(box, self.placed) else 1, self.strokes(box), index)
            if best is None or score < best:
                best, chosen = score, candidate
        self.placed.append(label_box(text, *chosen, font))
        return chosen


def _bezier(a: float, b: float, c: float, d: float, t: float) -> float:
    u = 1 - t
    return u * u * u * a + 3 * u * u * t * b + 3 * u * t * t * c + t * t * t * d


def _polyline(commands: list[Command], steps: int = 6) -> list[tuple[float, float]]:
    """The path's points, cubic curves sampled at ``steps`` points."""
    points: list[tuple[float, float]] = []
    for command in commands:
        values = [float(v) for v in command[1:]]  # type: ignore[arg-type]
        if command[0] in ("M", "L"):
            points.append((values[0], values[1]))
        else:
            (x0, y0) = points[-1]
            for k in range(1, steps + 1):
                t = k / steps
                points.append((_bezier(x0, values[0], values[2], values[4], t),
                               _bezier(y0, values[1], values[3], values[5], t)))
    return points


__all__ = ["Drawing", "Route", "Sizes", "label_box", "layout"]
