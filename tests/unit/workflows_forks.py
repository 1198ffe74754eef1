"""The workflows of tests/unit/test_forks.py and tests/integration/test_forks_on_rq.py."""

from __future__ import annotations

import pikku_workflows as pw
from tests.testapp.shared import record

#: Stand-ins for a deploy: ``fixed`` mends ``fork_buggy``; ``renamed`` renames the step
#: "Price" (the code no longer replays runs recorded before it).
FLAGS = {"fixed": False, "renamed": False}


@pw.function
def fork_echo(data, ctx):
    record("fork_echo", data, ctx)
    return data


@pw.function
def fork_buggy(data, ctx):
    """Fails until the bug is mended (``FLAGS["fixed"]``) or the input says ``ok``."""
    record("fork_buggy", data, ctx)
    if not (FLAGS["fixed"] or (data or {}).get("ok")):
        raise ValueError("the bug")
    return {"charged": True}


@pw.workflow
def fork_orders(wf, data):
    if data.get("express"):
        wf.do("Express", fork_echo, {"n": 0})
    reserved = wf.do("Reserve", fork_echo, {"n": 1})
    price = wf.do("Price v2" if FLAGS["renamed"] else "Price", fork_echo, {"n": 2})
    charge = wf.do("Charge", fork_buggy, {"ok": data.get("ok", False)}, retries=0,
                   on_error="refund")
    shipped = wf.do("Ship", fork_echo, {"n": 3})
    return {"reserved": reserved, "price": price, "charge": charge, "shipped": shipped}


@pw.workflow
def fork_redeployed(wf, data):
    """Waits for the warehouse after its price: a deploy that renames "Price" meets it
    suspended, and its resume stops with VERSION_CONFLICT."""
    wf.do("Reserve", fork_echo, {"n": 1})
    wf.do("Price v2" if FLAGS["renamed"] else "Price", fork_echo, {"n": 2})
    wf.suspend("warehouse")
    return wf.do("Ship", fork_echo, {"n": 3})


@pw.workflow
def fork_fan(wf, data):
    wf.do("Prepare", fork_echo, {"n": 0})
    parts = wf.parallel([(f"Part {i}", fork_buggy if i == 1 else fork_echo, {"i": i})
                         for i in range(3)], retries=0)
    return {"parts": parts, "done": wf.do("Done", fork_echo, {"n": 9})}


@pw.workflow
def fork_child_buggy(wf, data):
    return wf.do("Work", fork_buggy, {}, retries=0)


@pw.workflow
def fork_parent(wf, data):
    first = wf.do("First child", "child_ok", {"n": 2})
    second = wf.do("Second child", "fork_child_buggy", {})
    return {"first": first, "second": second}


@pw.workflow
def fork_gated(wf, data):
    wf.set_state("seen", True)
    wf.do("Prepare", fork_echo, {"n": 0})
    answer = wf.approval("Sign-off")
    charge = wf.do("Charge", fork_buggy, {}, retries=0)
    return {"answer": answer["status"], "charge": charge}


pw.graph_workflow(
    "fork_graph",
    nodes={"start": "fork_echo", "items": "fork_echo", "mid": "fork_buggy",
           "end": "fork_echo", "side": "fork_echo"},
    config={
        "start": {"next": ["items", "side"]},
        "items": {"for_each": pw.ref("trigger", "items"), "next": "mid"},
        "mid": {"input": {"values": pw.ref("items")}, "next": "end", "retries": 0},
    },
)
