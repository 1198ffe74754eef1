"""The graph workflows of tests/unit/test_graph.py."""

from __future__ import annotations

import pikku_workflows as pw
from tests.testapp.shared import record


@pw.function
def square(data):
    record("square", data)
    return data * data


@pw.function
def pick_branch(data, ctx):
    ctx.branch(data["branch"])
    return data["branch"]


pw.graph_workflow(
    "diamond",
    nodes={"a": "echo", "b": "add", "c": "add", "join": "total"},
    config={
        "a": {"next": ["b", "c"]},
        "b": {"input": {"a": pw.ref("a", "n"), "b": pw.ref("a", "n")}, "next": "join"},
        "c": {"input": {"a": pw.ref("a", "m"), "b": pw.ref("a", "m")}, "next": "join"},
        "join": {"input": {"values": [pw.ref("b"), pw.ref("c")]}},
    },
    output="join",
)


pw.graph_workflow(
    "squares",
    nodes={"numbers": "echo", "square": "square", "sum": "total"},
    config={
        "numbers": {"next": "square"},
        "square": {"for_each": pw.ref("numbers", "values"), "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
)


pw.graph_workflow(
    "squares_in_order",
    nodes={"square": "square", "sum": "total"},
    config={
        "square": {"for_each": pw.ref("trigger", "values"), "mode": "sequential",
                   "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
)


pw.graph_workflow(
    "deadlocks",
    nodes={"choose": "pick_branch", "left": "echo", "right": "echo"},
    config={
        "choose": {"next": {"x": "right", "y": "left"}},
        "right": {"input": {"needs": pw.ref("left")}},
    },
)


pw.graph_workflow(
    "graph_on_error",
    nodes={"charge": "always_fails", "cleanup": "refund", "after": "echo"},
    config={
        "charge": {"retries": 1, "on_error": "cleanup", "next": "after"},
    },
    entry="charge",
)


pw.graph_workflow(
    "two_doors",
    nodes={"web": "echo", "api": "echo", "done": "echo"},
    config={"web": {"next": "done"}, "api": {"next": "done"}},
)


pw.graph_workflow(
    "graph_with_child",
    nodes={"prepare": "echo", "child": "child_ok", "gate": "child_suspends"},
    config={"prepare": {"next": "child"},
            "child": {"input": {"n": pw.ref("prepare", "n")}, "next": "gate"},
            "gate": {"input": {}}},
)


# A node that fails once and retries after a delay: the run waits for the retry.
graph_retry_after_delay = pw.graph_workflow(
    "graph_retry_after_delay",
    nodes={"charge": "flaky", "receipt": "echo"},
    config={"charge": {"retries": 3, "retry_delay": "5s", "next": "receipt"},
            "receipt": {"input": {"charged": pw.ref("charge")}}},
    output="receipt",
)
