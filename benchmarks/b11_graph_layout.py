"""B11: the console's graph layout: edge crossings against Graphviz dot, time of a big graph."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from typing import Any

from benchmarks.harness import Section, Target, bench_args, finish, ratio

SIZES: dict[str, dict[str, Any]] = {"tiny": {"corpus": 20, "big": 60, "repeats": 3},
                                    "full": {"corpus": 200, "big": 300, "repeats": 7}}
DOT_MISSING = ("Graphviz `dot` is not installed (apt-get install graphviz): the crossings "
               "comparison is skipped; everything else is measured.")


def setup_registry() -> None:
    """Django with the test settings: every workflow of the demo and of the test suites is
    registered (no database is touched)."""
    import django

    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ.setdefault("PIKKU_TEST_DB", "sqlite")
    django.setup()


def drawing_set(corpus_size: int, registered: bool = True) -> list[dict[str, Any]]:
    """The graphs compared: the registered workflows' (when asked) and the random corpus."""
    from pikku_workflows.registry import registry
    from tests.admin.graph_corpus import corpus

    graphs = [{"name": w.name, "set": "registered", **w.analysis.graph}
              for w in registry.workflows()] if registered else []
    return graphs + [{**g, "set": "random"} for g in corpus(corpus_size)]


def ours(graph: dict[str, Any]) -> tuple[int, list[str]]:
    """Crossings of our drawing of ``graph``, and what its geometry gets wrong."""
    from pikku_workflows.admin.graph_svg import _layout, draw
    from tests.admin.graph_corpus import problems, svg_crossings

    svg = draw(_layout(graph))
    return svg_crossings(svg), problems(svg)


def dot_source(graph: dict[str, Any]) -> str:
    """``graph`` in the DOT language, with our node size and edge labels."""
    from pikku_workflows.admin.graph_svg import NODE_H, NODE_W, _shown_label

    ids = {n["id"]: index for index, n in enumerate(graph["nodes"])}
    lines = ["digraph G {", "ranksep=0.75; nodesep=0.5;",
             f"node [shape=box fixedsize=true width={NODE_W / 72:.4f} "
             f"height={NODE_H / 72:.4f}];"]
    lines += [f"n{index};" for index in ids.values()]
    for edge in graph["edges"]:
        if edge["source"] in ids and edge["target"] in ids:
            label = _shown_label(edge)
            attrs = f" [label={json.dumps(label)}]" if label else ""
            lines.append(f"n{ids[edge['source']]} -> n{ids[edge['target']]}{attrs};")
    return "\n".join([*lines, "}"])


def dot_crossings(graph: dict[str, Any]) -> int:
    """Crossings of Graphviz dot's drawing of ``graph``, counted as ours are."""
    from tests.admin.graph_corpus import crossings, sample_path

    out = subprocess.run(["dot", "-Tjson"], input=dot_source(graph), capture_output=True,
                         text=True, check=True, timeout=60).stdout
    drawn = json.loads(out)
    names = {o["_gvid"]: o["name"] for o in drawn.get("objects", [])}
    lines = []
    for edge in drawn.get("edges", []):
        points: list[tuple[float, float]] = []
        for op in edge.get("_draw_", []):
            if op["op"] in ("b", "B"):
                control = op["points"]
                for k in range(0, len(control) - 3, 3):
                    a, b, c, d = control[k:k + 4]
                    (piece,) = sample_path(f"M{a[0]},{a[1]} C{b[0]},{b[1]} {c[0]},{c[1]} "
                                           f"{d[0]},{d[1]}")
                    points.extend(piece if not points else piece[1:])
        lines.append((names[edge["tail"]], names[edge["head"]], points))
    return crossings(lines)


def layout_ms(size: int, repeats: int) -> tuple[float, float, int]:
    """Median and best time (ms) to lay out a ``size``-node graph, and its edge count."""
    from pikku_workflows.admin.graph_svg import _layout
    from tests.admin.graph_corpus import big_graph

    graph = big_graph(size)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        _layout(graph)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), min(times), len(graph["edges"])


def compare(graphs: list[dict[str, Any]], with_dot: bool) -> dict[str, Any]:
    """Crossings per drawing set, ours and dot's, and the drawings that break a rule."""
    totals: dict[str, dict[str, int]] = {}
    problems: list[str] = []
    for graph in graphs:
        crossed, wrong = ours(graph)
        row = totals.setdefault(graph["set"], {"graphs": 0, "ours": 0, "dot": 0})
        row["graphs"] += 1
        row["ours"] += crossed
        if with_dot:
            row["dot"] += dot_crossings(graph)
        problems += [f"{graph['name']}: {p}" for p in wrong]
    return {"totals": totals, "problems": problems}


def main() -> None:
    args = bench_args(__doc__ or "", (), lambda *_: {})
    if args is None:
        return
    setup_registry()
    size = SIZES[args.size]
    with_dot = shutil.which("dot") is not None
    result = compare(drawing_set(size["corpus"]), with_dot)
    median, best, edges = layout_ms(size["big"], size["repeats"])
    section = Section(
        bench="B11", title="graph layout: crossings against Graphviz dot, time", size=args.size,
        workload=(f"the drawings of every registered workflow (the demo's and the test "
                  f"suites') and {size['corpus']} seeded random workflow graphs "
                  "(tests/unit/admin/graph_corpus.py), edge crossings counted on the drawn "
                  "geometry (pairs of edges without a common end), ours and Graphviz dot's on "
                  f"the same graphs, same node size and labels; then the layout of a "
                  f"{size['big']}-node graph ({edges} edges), median of {size['repeats']}"),
        columns=["drawings", "graphs", "crossings: ours", "crossings: dot", "ours / dot"],
    )
    totals = result["totals"]
    for name, row in [*totals.items(), ("total", {
            key: sum(r[key] for r in totals.values()) for key in ("graphs", "ours", "dot")})]:
        section.rows.append([name, row["graphs"], row["ours"],
                             row["dot"] if with_dot else "n/a",
                             f"{ratio(row['ours'], row['dot']):.2f}" if with_dot else "n/a"])
    ours_total = sum(r["ours"] for r in totals.values())
    dot_total = sum(r["dot"] for r in totals.values())
    if with_dot:
        section.targets.append(Target("crossings, ours / dot, summed over the drawings",
                                      ratio(ours_total, dot_total), 1.0, "x"))
    else:
        section.notes.append(DOT_MISSING)
        print(DOT_MISSING)
    section.targets.append(Target(f"layout of a {size['big']}-node graph (median)", median,
                                  300, "ms"))
    section.problems += [f"geometry: {p}" for p in result["problems"]]
    section.notes.append(
        f"{size['big']}-node layout: median {median:.0f} ms, best {best:.0f} ms (layered "
        "layout, edge routes and label places; drawn once per definition version, then "
        "cached).")
    section.notes.append(
        "Geometry: every drawing is also checked as the tests check it (no edge through a "
        "node that is not one of its ends, no label on a node, no overlapping nodes); a "
        "failure is listed as a correctness problem.")
    finish(section, args)


if __name__ == "__main__":
    main()
