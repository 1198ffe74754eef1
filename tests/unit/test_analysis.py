"""Static analysis of DSL workflow bodies: step graph, planned steps and version hash."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import pytest

from pikku_workflows.analysis import WorkflowAnalysis, analyse_workflow, normalized_source
from tests.testapp.shared import branching, sequential

NODE_KINDS = {"start", "end", "step", "inline", "child", "sleep", "suspend", "approval",
              "parallel", "branch", "loop", "return", "cancel", "unknown"}
EDGE_KINDS = {"next", "branch", "loop", "on_error"}


def make_label(data):
    return data


# --- workflows under analysis (plain functions: analysed, never registered or run) ----------

def linear(wf, data):
    total = wf.do("Add", "add", {"a": data["x"], "b": 1})
    wf.do("Label", make_label, total, retries=2)
    return total


def tiers(wf, data):
    wf.do("Quote", "quote", data)
    if data["amount"] > 1000:
        wf.approval("large-order", approvers="not-initiator")
    elif data["amount"] > 100:
        wf.do("Check stock", "check_stock", data)
    else:
        wf.do("Fast path", "fast_path", data)
    wf.do("Ship", "ship", data)


def optional_step(wf, data):
    if data.get("gift"):
        wf.do("Wrap", "wrap", data)
    wf.do("Ship", "ship", data)


def same_name_in_arms(wf, data):
    if data["express"]:
        wf.do("Ship", "ship_express", data)
    else:
        wf.do("Ship", "ship_standard", data)


def early_exit(wf, data):
    if not data["items"]:
        return None
    return wf.do("Pack", "pack", data)


def per_sku(wf, data):
    wf.do("Open", "open_batch", data)
    for sku in data["skus"]:
        wf.do("Reserve", "reserve", sku)
        wf.sleep("Breathe", 1)
    wf.do("Close", "close_batch", data)


def literal_parallel(wf, data):
    results = wf.parallel([
        ("Email", "send_email", data),
        ("SMS", "send_sms", data),
        ("Push", lambda: "pushed"),
    ], retries=0)
    wf.do("Audit", "audit", results)


def labels_fan_out(wf, data):
    return wf.parallel([(f"Label {s}", "make_label", {"sku": s}) for s in data["skus"]])


def dynamic_names(wf, data):
    wf.do(f"Charge {data['order']}", "charge", data)
    name = data["step"]
    wf.do(name, "anything", data)


def gates(wf, data):
    wf.suspend("wait-for_customer")
    decision = wf.approval("manager_sign-off", expiry="2d", approvers="owner")
    wf.sleep("Cool off", "5m")
    return decision


def compensated(wf, data):
    wf.do("Charge", "charge", data, on_error="refund")
    wf.do("Ship", "ship", data)


def guarded(wf, data):
    try:
        wf.do("Charge", "charge", data, retries=0)
    except Exception:
        return "declined"
    while wf.get_state().get("polling"):
        wf.sleep("Poll", 10)
    return "paid"


def repeated(wf, data):
    wf.do("Echo", "echo", 1)
    wf.do("Echo", "echo", 2)
    wf.do("Echo", "echo", 3)


def inline_closure(wf, data):
    note = wf.do("Compose note", lambda: f"Order {data['order']} paid")
    return wf.do("Send", "send", note)


def cancelling(wf, data):
    wf.do("Before", "echo", 1)
    if data.get("cancel"):
        wf.cancel("customer changed their mind")
    wf.do("After", "echo", 2)


def explosive(wf, data):
    raise RuntimeError("never run")


def odd_code(wf, data):
    with open(data["path"]) as handle:
        wf.do("Read", "read", handle.name)
    match data:
        case {"kind": "a"}:
            wf.do("A", "a")

    def helper():
        return wf.do("Hidden", "hidden")

    steps_elsewhere(wf, data)
    either = wf.do("X", "x") if data else wf.do("Y", "y")
    return [wf.do("Echo", "echo", i) for i in range(3)], either, helper


def steps_elsewhere(wf, data):
    return None


# --- helpers ---------------------------------------------------------------------------------

def _nodes(analysis: WorkflowAnalysis) -> dict[str, dict[str, Any]]:
    return {node["id"]: node for node in analysis.graph["nodes"]}


def _edges(analysis: WorkflowAnalysis) -> set[tuple[str, str, str, str | None]]:
    return {(e["source"], e["target"], e["kind"], e["label"]) for e in analysis.graph["edges"]}


def _first_line(fn) -> int:
    return inspect.getsourcelines(fn)[1]


def _planned_names(analysis: WorkflowAnalysis) -> list[str]:
    return [step["step_name"] for step in analysis.planned_steps]


ALL_WORKFLOWS = [linear, tiers, optional_step, same_name_in_arms, early_exit, per_sku,
                 literal_parallel, labels_fan_out, dynamic_names, gates, compensated, guarded,
                 repeated, inline_closure, cancelling, explosive, odd_code, sequential, branching]


# --- tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", ALL_WORKFLOWS, ids=lambda fn: fn.__name__)
def test_graph_is_well_formed_and_json_serializable(fn):
    analysis = analyse_workflow(fn)
    graph = json.loads(json.dumps(analysis.graph))
    assert graph == analysis.graph
    ids = [node["id"] for node in graph["nodes"]]
    assert len(ids) == len(set(ids))
    assert ids[0] == "start" and ids[-1] == "end"
    for node in graph["nodes"]:
        assert {"id", "kind", "label", "step_name", "rpc_name", "dynamic", "line"} <= set(node)
        assert node["kind"] in NODE_KINDS
        assert isinstance(node["line"], int) and isinstance(node["dynamic"], bool)
    for edge in graph["edges"]:
        assert set(edge) == {"source", "target", "label", "kind"}
        assert edge["kind"] in EDGE_KINDS
        assert edge["source"] in ids and edge["target"] in ids
    assert re.fullmatch(r"[0-9a-f]{12}", analysis.graph_hash)
    assert analyse_workflow(fn) == analysis


def test_linear_workflow_is_deterministic_and_planned_in_order():
    analysis = analyse_workflow(linear)
    assert analysis.deterministic is True
    assert analysis.planned_steps == [{"step_name": "Add"}, {"step_name": "Label"}]
    nodes = _nodes(analysis)
    assert nodes["Add"] == {
        "id": "Add", "kind": "step", "label": "Add", "step_name": "Add", "rpc_name": "add",
        "dynamic": False, "line": _first_line(linear) + 1,
    }
    # A registered function object passed by name: its identifier is the rpc name.
    assert nodes["Label"]["rpc_name"] == "make_label"
    assert nodes["Label"]["retries"] == 2
    assert _edges(analysis) == {
        ("start", "Add", "next", None), ("Add", "Label", "next", None),
        ("Label", "return_1", "next", None), ("return_1", "end", "next", None),
    }


def test_if_elif_else_labels_every_arm_and_plans_all_of_them():
    analysis = analyse_workflow(tiers)
    nodes, edges = _nodes(analysis), _edges(analysis)
    assert nodes["branch_1"]["kind"] == "branch"
    assert nodes["branch_1"]["condition"] == "data['amount'] > 1000"
    assert {
        ("branch_1", "__workflow_approval:large-order", "branch", "data['amount'] > 1000"),
        ("branch_1", "Check stock", "branch", "elif data['amount'] > 100"),
        ("branch_1", "Fast path", "branch", "else"),
    } <= edges
    # The arms rejoin at the next statement.
    for arm in ("__workflow_approval:large-order", "Check stock", "Fast path"):
        assert (arm, "Ship", "next", None) in edges
    assert analysis.deterministic is False
    assert _planned_names(analysis) == [
        "Quote", "__workflow_approval:large-order", "Check stock", "Fast path", "Ship",
    ]


def test_if_without_else_has_an_else_edge_to_the_join():
    analysis = analyse_workflow(optional_step)
    edges = _edges(analysis)
    assert ("branch_1", "Wrap", "branch", "data.get('gift')") in edges
    assert ("branch_1", "Ship", "branch", "else") in edges
    assert ("Wrap", "Ship", "next", None) in edges
    assert analysis.deterministic is False
    assert _planned_names(analysis) == ["Wrap", "Ship"]


def test_one_name_in_two_arms_is_planned_once_with_two_nodes():
    analysis = analyse_workflow(same_name_in_arms)
    steps = [n for n in analysis.graph["nodes"] if n["kind"] == "step"]
    # Only one arm runs, so both record the key "Ship"; node ids stay unique.
    assert [(n["step_name"], n["rpc_name"]) for n in steps] == [
        ("Ship", "ship_express"), ("Ship", "ship_standard"),
    ]
    assert len({n["id"] for n in steps}) == 2
    assert analysis.planned_steps == [{"step_name": "Ship"}]


def test_early_return_is_a_branch_ending_the_run():
    analysis = analyse_workflow(early_exit)
    edges = _edges(analysis)
    assert ("branch_1", "return_1", "branch", "not data['items']") in edges
    assert ("return_1", "end", "next", None) in edges
    assert ("branch_1", "Pack", "branch", "else") in edges
    assert analysis.deterministic is False
    assert analysis.planned_steps == [{"step_name": "Pack"}]


def test_for_loop_has_a_loop_node_and_a_back_edge():
    analysis = analyse_workflow(per_sku)
    nodes, edges = _nodes(analysis), _edges(analysis)
    assert nodes["loop_1"]["kind"] == "loop"
    assert nodes["loop_1"]["iterable"] == "data['skus']"
    assert nodes["loop_1"]["label"] == "for sku in data['skus']"
    assert {
        ("Open", "loop_1", "next", None),
        ("loop_1", "Reserve", "loop", None),
        ("Reserve", "Breathe", "next", None),
        ("Breathe", "loop_1", "loop", None),
        ("loop_1", "Close", "next", None),
    } <= edges
    # Steps in a loop are reached under several keys (Reserve, Reserve#1...).
    assert nodes["Reserve"]["dynamic"] is True and nodes["Open"]["dynamic"] is False
    assert analysis.deterministic is False
    assert analysis.planned_steps == []


def test_parallel_with_a_literal_list_has_one_child_per_call():
    analysis = analyse_workflow(literal_parallel)
    nodes, edges = _nodes(analysis), _edges(analysis)
    assert nodes["parallel_1"]["kind"] == "parallel"
    assert "fan_out" not in nodes["parallel_1"]
    for child in ("Email", "SMS", "Push"):
        assert ("parallel_1", child, "next", None) in edges
        assert (child, "Audit", "next", None) in edges
    assert nodes["Email"]["retries"] == 0 and nodes["Email"]["rpc_name"] == "send_email"
    assert nodes["Push"]["kind"] == "inline" and nodes["Push"]["rpc_name"] is None
    assert analysis.deterministic is True
    assert _planned_names(analysis) == ["Email", "SMS", "Push", "Audit"]


def test_parallel_comprehension_is_a_fan_out_with_a_template_child():
    analysis = analyse_workflow(labels_fan_out)
    nodes, edges = _nodes(analysis), _edges(analysis)
    fan_out = nodes["parallel_1"]
    assert fan_out["fan_out"] is True and fan_out["iterable"] == "data['skus']"
    children = [n for n in analysis.graph["nodes"] if n["kind"] == "step"]
    assert len(children) == 1
    child = children[0]
    assert child["step_name"] == "Label {s}" and child["dynamic"] is True
    assert child["rpc_name"] == "make_label"
    assert ("parallel_1", child["id"], "next", None) in edges
    assert (child["id"], "return_1", "next", None) in edges
    assert analysis.deterministic is False and analysis.planned_steps == []


def test_f_string_and_variable_names_are_dynamic_templates():
    analysis = analyse_workflow(dynamic_names)
    steps = [n for n in analysis.graph["nodes"] if n["kind"] == "step"]
    assert [(n["id"], n["step_name"], n["dynamic"]) for n in steps] == [
        ("step_1", "Charge {data['order']}", True), ("step_2", "{name}", True),
    ]
    assert analysis.deterministic is False and analysis.planned_steps == []


def test_suspend_approval_and_sleep():
    analysis = analyse_workflow(gates)
    nodes = _nodes(analysis)
    suspend = nodes["__workflow_suspend:wait-for_customer"]
    # A gate's label is its reason as typed: punctuation and case kept (the API's label).
    assert suspend["kind"] == "suspend" and suspend["label"] == "wait-for_customer"
    assert suspend["step_name"] == "__workflow_suspend:wait-for_customer"
    approval = nodes["__workflow_approval:manager_sign-off"]
    assert approval["kind"] == "approval" and approval["label"] == "manager_sign-off"
    assert approval["expiry"] == "2d" and approval["approvers"] == "owner"
    assert nodes["Cool off"]["kind"] == "sleep" and nodes["Cool off"]["duration"] == "5m"
    assert analysis.deterministic is True
    assert analysis.planned_steps == [
        {"step_name": "__workflow_suspend:wait-for_customer",
         "display_name": "wait-for_customer"},
        {"step_name": "__workflow_approval:manager_sign-off",
         "display_name": "manager_sign-off"},
        {"step_name": "Cool off"},
    ]


def test_on_error_adds_a_compensation_node_not_planned():
    analysis = analyse_workflow(compensated)
    nodes, edges = _nodes(analysis), _edges(analysis)
    assert nodes["Charge"]["on_error"] == "refund"
    compensation = nodes["Charge:onError"]
    assert compensation["kind"] == "step" and compensation["rpc_name"] == "refund"
    assert compensation["step_name"] == "Charge:onError"
    assert ("Charge", "Charge:onError", "on_error", "on error") in edges
    assert ("Charge", "Ship", "next", None) in edges
    assert analysis.planned_steps == [{"step_name": "Charge"}, {"step_name": "Ship"}]


def test_try_and_while_become_unknown_regions_still_analysed():
    analysis = analyse_workflow(guarded)
    nodes, edges = _nodes(analysis), _edges(analysis)
    assert nodes["unknown_1"]["kind"] == "unknown" and nodes["unknown_1"]["label"] == "try"
    assert nodes["unknown_2"]["label"] == "while wf.get_state().get('polling')"
    # The steps inside are still drawn, flagged dynamic.
    assert nodes["Charge"]["dynamic"] is True and nodes["Charge"]["retries"] == 0
    assert nodes["Poll"]["kind"] == "sleep" and nodes["Poll"]["dynamic"] is True
    assert {("unknown_1", "Charge", "next", None), ("Charge", "unknown_2", "next", None),
            ("unknown_2", "Poll", "next", None), ("unknown_1", "end", "next", "return")} <= edges
    assert analysis.deterministic is False and analysis.planned_steps == []


def test_other_constructs_are_unknown_regions_and_never_rejected():
    analysis = analyse_workflow(odd_code)
    labels = [n["label"] for n in analysis.graph["nodes"] if n["kind"] == "unknown"]
    assert labels == [
        "with open(data['path']) as handle", "match data", "def helper()",
        "steps_elsewhere(wf, data)", "wf.do('X', 'x') if data else wf.do('Y', 'y')",
    ]
    step_names = {n["step_name"] for n in analysis.graph["nodes"] if n["kind"] == "step"}
    assert {"Read", "A", "Hidden", "X", "Y", "Echo"} <= step_names
    assert any(n["kind"] == "loop" for n in analysis.graph["nodes"])  # the comprehension
    assert analysis.deterministic is False and analysis.planned_steps == []


def test_a_body_is_never_executed():
    analysis = analyse_workflow(explosive)
    assert [(n["kind"], n["label"]) for n in analysis.graph["nodes"]] == [
        ("start", "start"), ("return", "raise RuntimeError('never run')"), ("end", "end"),
    ]
    assert analysis.deterministic is True and analysis.planned_steps == []


def test_a_repeated_name_gets_its_physical_key():
    analysis = analyse_workflow(repeated)
    assert [n["id"] for n in analysis.graph["nodes"]] == [
        "start", "Echo", "Echo#1", "Echo#2", "end",
    ]
    assert _planned_names(analysis) == ["Echo", "Echo#1", "Echo#2"]
    assert analysis.deterministic is True


def test_a_lambda_step_is_inline():
    analysis = analyse_workflow(inline_closure)
    nodes = _nodes(analysis)
    assert nodes["Compose note"]["kind"] == "inline"
    assert nodes["Compose note"]["rpc_name"] is None
    assert nodes["Send"]["kind"] == "step"
    assert analysis.deterministic is True


def test_cancel_ends_the_run():
    analysis = analyse_workflow(cancelling)
    nodes, edges = _nodes(analysis), _edges(analysis)
    assert nodes["cancel_1"]["reason"] == "customer changed their mind"
    assert ("branch_1", "cancel_1", "branch", "data.get('cancel')") in edges
    assert ("cancel_1", "end", "next", None) in edges
    assert ("branch_1", "After", "branch", "else") in edges
    assert _planned_names(analysis) == ["Before", "After"]


# --- hashing -----------------------------------------------------------------------------------

def _tag(fn):
    fn.tagged = True
    return fn


def reserve_and_charge(wf, data):
    """The first copy."""
    wf.do("Reserve", "reserve", data)
    return wf.do("Charge", "charge", data)


def _copy_elsewhere():
    @_tag
    def reserve_and_charge(wf, data):
        """A different docstring, a decorator, another place in the file."""
        wf.do("Reserve", "reserve", data)
        return wf.do("Charge", "charge", data)

    return reserve_and_charge


def _renamed_step():
    def reserve_and_charge(wf, data):
        wf.do("Reserve", "reserve", data)
        return wf.do("Charge card", "charge", data)

    return reserve_and_charge


def _reordered():
    def reserve_and_charge(wf, data):
        if data:
            wf.do("Reserve", "reserve", data)
        return wf.do("Charge", "charge", data)

    return reserve_and_charge


def test_hash_ignores_docstring_decorators_and_position():
    first, second = analyse_workflow(reserve_and_charge), analyse_workflow(_copy_elsewhere())
    assert normalized_source(reserve_and_charge) == normalized_source(_copy_elsewhere())
    assert _nodes(first)["Charge"]["line"] != _nodes(second)["Charge"]["line"]
    assert first.graph_hash == second.graph_hash


def test_hash_changes_with_a_step_name_or_the_control_flow():
    base = analyse_workflow(reserve_and_charge).graph_hash
    assert analyse_workflow(_renamed_step()).graph_hash != base
    assert analyse_workflow(_reordered()).graph_hash != base


def test_a_function_without_readable_source_does_not_raise():
    namespace: dict[str, Any] = {}
    exec("def ghost(wf, data):\n    return wf.do('A', 'echo', 1)\n", namespace)
    analysis = analyse_workflow(namespace["ghost"])
    assert [n["kind"] for n in analysis.graph["nodes"]] == ["start", "unknown", "end"]
    assert analysis.deterministic is False and analysis.planned_steps == []
    assert re.fullmatch(r"[0-9a-f]{12}", analysis.graph_hash)
    json.dumps(analysis.graph)


# --- the test app's registered workflows -------------------------------------------------------

def test_registered_sequential_workflow():
    analysis = analyse_workflow(sequential)
    assert analysis.deterministic is True
    assert analysis.planned_steps == [{"step_name": "Add"}, {"step_name": "Double"}]
    nodes = _nodes(analysis)
    assert nodes["Add"]["rpc_name"] == "add" and nodes["Double"]["rpc_name"] == "double"
    assert ("Add", "Double", "next", None) in _edges(analysis)


def test_registered_branching_workflow():
    analysis = analyse_workflow(branching)
    edges = _edges(analysis)
    assert ("branch_1", "Bulk discount", "branch", "data['amount'] > 100") in edges
    assert ("branch_1", "Full price", "branch", "else") in edges
    assert ("Bulk discount", "return_1", "next", None) in edges
    assert ("Full price", "return_1", "next", None) in edges
    assert analysis.deterministic is False
    assert _planned_names(analysis) == ["Bulk discount", "Full price"]


def test_a_bug_in_the_analysis_is_logged_and_leaves_the_workflow_usable(monkeypatch, caplog):
    from pikku_workflows import analysis

    def broken(self):
        raise RuntimeError("an analysis bug")

    monkeypatch.setattr(analysis._GraphBuilder, "build", broken)
    with caplog.at_level("ERROR", logger="pikku_workflows.analysis"):
        result = analyse_workflow(linear)
    assert not result.deterministic  # drawn as an opaque body: runs replay as always
    assert "unknown" in {node["kind"] for node in result.graph["nodes"]}
    [record] = [r for r in caplog.records if r.name == "pikku_workflows.analysis"]
    assert "could not be drawn" in record.getMessage() and "linear" in record.getMessage()
    assert record.exc_info is not None and "an analysis bug" in str(record.exc_info[1])


def test_a_steps_literal_description_reaches_its_node_and_the_graphs_tooltip():
    from pikku_workflows.admin.graph_overlay import node_title

    def described(wf, data):
        wf.do("Charge", "charge", data, description="Takes the money; refunds on failure")
        return wf.do("Ship", "ship", data, description=data["note"])  # not a literal

    nodes = {n["step_name"]: n for n in analyse_workflow(described).graph["nodes"]
             if n.get("step_name")}
    assert nodes["Charge"]["description"] == "Takes the money; refunds on failure"
    assert "description" not in nodes["Ship"]
    assert node_title(nodes["Charge"]) == "Charge\nTakes the money; refunds on failure"
    assert node_title(nodes["Ship"]) == "Ship"
