"""The layered layout, checked on the drawn SVG's geometry: no edge passes through a node
that is not one of its ends, no edge label sits on a node, no two nodes overlap; over the
demo's workflows, every workflow the test suites register and a seeded corpus of random
workflow graphs (``graph_corpus``)."""

from __future__ import annotations

import pytest

from pikku_workflows.admin import graph_layout
from pikku_workflows.admin.graph_svg import _layout, definition_svg, draw
from pikku_workflows.registry import registry
from tests.admin.graph_corpus import (
    corpus,
    crossings,
    problems,
    read,
    sample_path,
    svg_crossings,
)

CORPUS = corpus(200)
DEMO = ("order_saga", "team_onboarding", "create_invoice")


def drawn(graph: dict) -> str:
    return draw(_layout(graph), title=graph.get("name", ""))


def names(graph: dict) -> tuple[set[str], list[str]]:
    return ({n["id"] for n in graph["nodes"]},
            sorted(f"{e['source']}->{e['target']}" for e in graph["edges"]))


def test_the_corpus_is_seeded_and_has_every_shape():
    assert len(CORPUS) == 200 and corpus(200) == CORPUS
    kinds = {e["kind"] for g in CORPUS for e in g["edges"]}
    assert kinds == {"next", "branch", "loop", "on_error"}
    assert any(e["source"] == e["target"] for g in CORPUS for e in g["edges"])
    assert sum(1 for g in CORPUS for e in g["edges"] if e.get("label")) > 300


def test_every_registered_workflow_is_drawn_truthfully():
    workflows = registry.workflows()
    assert {w.name for w in workflows} >= set(DEMO)
    assert len(workflows) > 60  # the demo's and every test suite's
    failures = {}
    for workflow in workflows:
        svg = definition_svg(workflow)
        found = problems(svg)
        if found:
            failures[workflow.name] = found
        geometry = read(svg)
        nodes, edges = names(workflow.analysis.graph)
        assert set(geometry.nodes) == nodes, workflow.name
        assert sorted(e.name for e in geometry.edges) == edges, workflow.name
    assert failures == {}


@pytest.mark.parametrize("index", range(0, 200, 10))
def test_the_random_corpus_is_drawn_truthfully(index):
    for graph in CORPUS[index:index + 10]:
        svg = drawn(graph)
        assert problems(svg) == [], graph["name"]
        geometry = read(svg)
        nodes, edges = names(graph)
        assert set(geometry.nodes) == nodes
        assert sorted(e.name for e in geometry.edges) == edges


def test_the_demo_drawings_the_issue_named():
    saga = read(definition_svg(registry.workflow("order_saga")))
    # The else edge of "amount > 1000" goes round the skipped discount, into the next
    # branch (paid by transfer or by card).
    (skip,) = [e for e in saga.edges if e.name == "branch_1->branch_2"]
    discount = saga.nodes["Apply bulk discount"]
    assert all(not (discount[0] < x < discount[2] and discount[1] < y < discount[3])
               for x, y in skip.points)
    onboarding = read(definition_svg(registry.workflow("team_onboarding")))
    end = onboarding.nodes["$end"]
    for edge in onboarding.edges:
        if edge.name.endswith("->$end"):  # every arrow ends on end's top side
            x, y = edge.points[-1]
            assert end[0] < x < end[2] and y == end[1], edge.name
    assert svg_crossings(definition_svg(registry.workflow("team_onboarding"))) == 0


def test_long_edges_pass_through_the_layers_beside_the_nodes():
    ids = ["a", "b", "c", "d", "e"]
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "e")]
    drawing = graph_layout.layout(ids, edges)
    assert [row for row in drawing.layers if row] == [["a"], ["b"], ["c"], ["d"], ["e"]]
    long = drawing.routes[4]
    points = [p for piece in sample_path(long.d()) for p in piece]
    for node in "bcd":
        x, y = drawing.position[node]
        assert all(not (x <= px <= x + 190 and y <= py <= y + 50) for px, py in points)
    # Through each layer it passes straight down (its dummies line up).
    verticals = [c for c in long.commands if c[0] == "L"]
    assert len(verticals) == 3 and len({c[1] for c in verticals}) == 1


def test_back_edges_and_self_loops_run_up_the_right_side():
    ids = ["head", "body", "tail"]
    edges = [("head", "body"), ("body", "tail"), ("tail", "head"), ("body", "body")]
    drawing = graph_layout.layout(ids, edges, ["", "", "again", "retry"])
    assert [row for row in drawing.layers if row] == [["head"], ["body"], ["tail"]]
    back, loop = drawing.routes[2], drawing.routes[3]
    assert back.back and loop.back
    right = min(drawing.position["head"][0], drawing.position["tail"][0]) + 190
    head_x, head_y = drawing.position["head"]
    points = [p for piece in sample_path(back.d()) for p in piece]
    assert points[0][0] == drawing.position["tail"][0] + 190  # leaves tail's right side
    assert points[-1] == (head_x + 190, points[-1][1])  # enters head's right side
    assert head_y < points[-1][1] < head_y + 50
    assert all(x >= right - 0.01 for x, _ in points)
    body_x, body_y = drawing.position["body"]
    loop_points = [p for piece in sample_path(loop.d()) for p in piece]
    assert all(body_x + 190 <= x <= body_x + 190 + 40 for x, _ in loop_points)
    assert all(body_y <= y <= body_y + 50 for _, y in loop_points)
    assert back.label is not None and loop.label is not None


def test_declared_loop_edges_are_reversed_only_when_they_close_a_cycle():
    # ten_steps: the loop's head, an edge into its body and one back; both declared loops.
    ids = ["start", "loop", "body", "return", "end"]
    edges = [("start", "loop"), ("loop", "body"), ("body", "loop"), ("loop", "return"),
             ("return", "end")]
    drawing = graph_layout.layout(ids, edges, loops={1, 2})
    assert not drawing.routes[1].back and drawing.routes[2].back
    layer = {n: i for i, row in enumerate(drawing.layers) for n in row}
    assert layer["loop"] < layer["body"]


def test_crossings_are_reduced_to_none_when_the_graph_allows():
    # Declared in the worst order: two layers whose straight drawing crosses everywhere.
    ids = ["s", "a1", "a2", "a3", "b3", "b2", "b1"]
    edges = [("s", "a1"), ("s", "a2"), ("s", "a3"), ("a1", "b1"), ("a2", "b2"),
             ("a3", "b3")]
    drawing = graph_layout.layout(ids, edges)
    assert drawing.crossings == 0
    svg = drawn({"nodes": [{"id": i, "kind": "step", "label": i} for i in ids],
                 "edges": [{"source": s, "target": t} for s, t in edges]})
    assert svg_crossings(svg) == 0 and problems(svg) == []


def test_the_crossing_count_counts_crossings():
    lines = [("a", "b", [(0.0, 0.0), (10.0, 10.0)]), ("c", "d", [(0.0, 10.0), (10.0, 0.0)]),
             ("a", "e", [(0.0, 0.0), (10.0, 5.0)])]
    assert crossings(lines) == 2  # a->e and a->b share their end a: they do not count
    assert crossings(lines[:2]) == 1 and crossings(lines[::2]) == 0


def test_labels_are_placed_off_nodes_and_off_each_other():
    ids = ["b"] + [f"t{i}" for i in range(5)]
    edges = [("b", f"t{i}") for i in range(5)]
    labels = ["approved", "rejected", "amount > 1000", "else", "on error"]
    drawing = graph_layout.layout(ids, edges, labels)
    boxes = [graph_layout.label_box(text, *drawing.routes[i].label, 11)
             for i, text in enumerate(labels)]
    for i, box in enumerate(boxes):
        for other in boxes[i + 1:]:
            assert box[2] <= other[0] or other[2] <= box[0] or box[3] <= other[1] \
                or other[3] <= box[1]


def test_the_layout_is_deterministic_and_skips_edges_to_unknown_nodes():
    graph = CORPUS[7]
    ids = [n["id"] for n in graph["nodes"]]
    edges = [(e["source"], e["target"]) for e in graph["edges"]] + [("start", "nowhere")]
    first, second = graph_layout.layout(ids, edges), graph_layout.layout(ids, edges)
    assert first.position == second.position
    assert {i: r.d() for i, r in first.routes.items()} == \
        {i: r.d() for i, r in second.routes.items()}
    assert len(edges) - 1 not in first.routes
    assert graph_layout.layout([], []).routes == {}


def test_labels_stay_inside_the_drawing():
    # A self-loop on the top node and long labels on edges at the drawing's left edge.
    graph = {"nodes": [{"id": i, "kind": "step", "label": i} for i in "abcd"],
             "edges": [{"source": "a", "target": "a", "kind": "loop",
                        "label": "again and again and again"},
                       {"source": "a", "target": "b", "label": "a rather long branch key"},
                       {"source": "a", "target": "c", "label": "another long branch key"},
                       {"source": "b", "target": "d", "label": "a long key on the left"},
                       {"source": "c", "target": "d"}, {"source": "d", "target": "d",
                                                        "kind": "loop", "label": "retry"}]}
    svg = drawn(graph)
    assert problems(svg) == []
    assert len([label for e in read(svg).edges for label in e.labels]) == 5
