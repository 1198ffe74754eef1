"""The overlay tells the truth: every rule read back from the SVG's elements (classes,
text, tooltips), never from golden files.

A taken edge is one the run went along; a taken path runs unbroken from the start to the
end (or to where the run is); what was not taken is dashed and grey; counts, attempts,
retries, waits and decisions are spelled out; engine names never show.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.admin.graph_overlay import when
from pikku_workflows.admin.graph_svg import run_svg
from pikku_workflows.analysis import analyse_workflow
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock

pytestmark = pytest.mark.django_db
SVG = "{http://www.w3.org/2000/svg}"


@dataclass
class Node:
    id: str
    classes: set[str]
    label: str
    lines: list[str]
    tooltip: str
    badge: str


@dataclass
class Edge:
    source: str
    target: str
    classes: set[str]
    label: str


@dataclass
class Drawing:
    nodes: dict[str, Node]
    edges: list[Edge]

    def labelled(self, label: str) -> Node:
        found = [n for n in self.nodes.values() if n.label == label]
        assert len(found) == 1, (label, found)
        return found[0]

    def edge(self, source: str, target: str) -> Edge:
        found = [e for e in self.edges if (e.source, e.target) == (source, target)]
        assert len(found) == 1, (source, target, found)
        return found[0]

    def taken(self) -> list[Edge]:
        return [e for e in self.edges if "taken" in e.classes]


def parse(svg: str, graph: dict) -> Drawing:
    """The drawing's nodes and edges (edges matched to the graph's, in order)."""
    root = ET.fromstring(svg)
    nodes = {}
    for group in root.iter(f"{SVG}g"):
        node_id = group.get("data-node")
        if node_id is None:
            continue
        texts = [t for t in group.iter(f"{SVG}text")]
        badge = next((t.text or "" for b in group.iter(f"{SVG}g")
                      if "badge" in (b.get("class") or "") for t in b.iter(f"{SVG}text")), "")
        shown = [t for t in texts if t.text != badge or not badge]
        nodes[node_id] = Node(
            id=node_id, classes=set((group.get("class") or "").split()),
            label=shown[0].text or "", lines=[t.text or "" for t in shown[1:]],
            tooltip=group.find(f"{SVG}title").text or "", badge=badge)
    edge_groups = [g for g in root.iter(f"{SVG}g")
                   if "edge" in (g.get("class") or "").split()]
    assert len(edge_groups) == len(graph["edges"])
    edges = []
    for group, edge in zip(edge_groups, graph["edges"], strict=True):
        text = group.find(f"{SVG}text")
        edges.append(Edge(edge["source"], edge["target"],
                          set((group.get("class") or "").split()),
                          text.text if text is not None else ""))
    return Drawing(nodes, edges)


def drawing(run) -> Drawing:
    run = WorkflowRun.objects.get(pk=run.pk)
    graph = registry.workflow(run.workflow).analysis.graph
    d = parse(run_svg(run), graph)
    # No line under a label is cut in these runs: counts, times and decisions fit.
    assert not [line for n in d.nodes.values() for line in n.lines if line.endswith("…")]
    return d


def connected(d: Drawing, start: str, end: str) -> bool:
    """Whether the taken edges lead from ``start`` to ``end``."""
    out: dict[str, list[str]] = {}
    for e in d.taken():
        out.setdefault(e.source, []).append(e.target)
    todo, seen = [start], {start}
    while todo:
        node = todo.pop()
        if node == end:
            return True
        for target in out.get(node, ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return False


def assert_untaken_are_grey(d: Drawing):
    for e in d.edges:
        assert ("taken" in e.classes) != ("untaken" in e.classes), e
    for n in d.nodes.values():
        if "not-reached" in n.classes:
            assert not any("taken" in e.classes for e in d.edges if n.id in (e.source, e.target))


# --- the path ------------------------------------------------------------------------------


def test_a_small_order_takes_the_else_branch_and_skips_the_bulk_discount():
    run = pw.start_workflow("order_saga", {"order_id": 8, "amount": 40, "skus": ["pin"],
                                           "cool_off": 0})
    assert run.status == "completed"
    d = drawing(run)
    discount = d.nodes["Apply bulk discount"]
    assert "not-reached" in discount.classes and discount.lines == ["not reached"]
    into = [e for e in d.edges if e.target == "Apply bulk discount"]
    out = [e for e in d.edges if e.source == "Apply bulk discount"]
    assert into and out and all("untaken" in e.classes for e in into + out)
    # Around the discount, then (paid by card, not by transfer) on to the charge.
    assert d.edge("branch_1", "branch_2").classes >= {"branch", "taken"}
    assert d.edge("branch_1", "branch_2").label == "else"
    assert d.edge("branch_2", "Charge").classes >= {"branch", "taken"}
    assert d.edge("branch_2", "Charge").label == "else"
    # The approval arm (amount > 500) was not taken either; the sign-off never reached.
    assert "not-reached" in d.nodes["__workflow_approval:Manager sign-off"].classes
    assert "untaken" in d.edge("Charge", "Charge:onError").classes
    assert connected(d, "start", "end")
    assert_untaken_are_grey(d)


def test_a_large_order_takes_the_discount_and_the_sign_off_arm(django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "b@example.com", "pw")
    run = pw.start_workflow("order_saga", {"order_id": 7, "amount": 1200,
                                           "skus": ["mug", "tee"], "cool_off": 0})
    d = drawing(run)
    gate = "__workflow_approval:Manager sign-off"
    # The else edge around the discount is not taken, although both its ends were reached.
    assert "untaken" in d.edge("branch_1", "branch_2").classes
    assert "taken" in d.edge("branch_1", "Apply bulk discount").classes
    assert "taken" in d.edge("Apply bulk discount", "branch_2").classes
    assert "taken" in d.edge("branch_2", "Charge").classes
    assert connected(d, "start", gate) and not connected(d, gate, "end")
    node = d.nodes[gate]
    assert "suspended" in node.classes
    assert node.lines[0] == "waiting for approval" and node.lines[1].startswith("expires ")
    assert node.label == "Manager sign-off" and node.badge == "approval"
    pw.approve_step(run.pk, "Manager sign-off", {"approved": True, "note": "fine by me"},
                    user=boss)
    d = drawing(run)
    node = d.nodes[gate]
    assert "succeeded" in node.classes
    assert node.lines == ["approved by boss", "“fine by me”"]
    assert not any("expires" in line for line in node.lines)
    assert "note: fine by me" in node.tooltip and f"user {boss.pk}" not in node.tooltip
    assert connected(d, "start", "end")
    labels = d.labelled("Label {sku}")
    assert labels.lines[0] == "2/2 succeeded"
    parallel = next(n for n in d.nodes.values() if "parallel" in n.classes)
    assert parallel.lines[0] == "2/2 succeeded"
    assert_untaken_are_grey(d)


def test_a_rejected_order_shows_the_rejection_and_the_cancel(django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "b@example.com", "pw")
    run = pw.start_workflow("order_saga", {"order_id": 7, "amount": 800, "skus": ["mug"],
                                           "cool_off": 0})
    pw.approve_step(run.pk, "Manager sign-off", {"approved": False}, user=boss)
    run.refresh_from_db()
    assert run.status == "cancelled"
    d = drawing(run)
    assert d.nodes["__workflow_approval:Manager sign-off"].lines == ["rejected by boss"]
    cancel = next(n for n in d.nodes.values() if "cancel" in n.classes
                  and "did not approve" in n.tooltip)
    assert "passed" in cancel.classes
    assert connected(d, "start", cancel.id) and connected(d, "start", "end")
    assert "not-reached" in d.nodes["Cool-off"].classes


def test_a_gate_in_a_cancelled_run_says_cancelled():
    run = pw.start_workflow("order_saga", {"order_id": 7, "amount": 800, "skus": ["mug"],
                                           "cool_off": 0})
    pw.cancel_run(run.pk, "customer left")
    node = drawing(run).nodes["__workflow_approval:Manager sign-off"]
    assert "cancelled" in node.classes and "failed" not in node.classes
    assert node.lines == ["cancelled"]


def test_a_dsl_loop_shows_its_iterations_and_its_back_edge():
    with registry.isolated():
        @pw.workflow(name="counts_to_ten")
        def counts_to_ten(wf, data):
            total = 0
            for i in range(10):
                total += wf.do(f"Step {i}", "echo", i)
            if data.get("extra"):
                wf.do("Extra", "echo", 0)
            return total

        run = pw.start_workflow("counts_to_ten", {})
        assert run.status == "completed"
        d = drawing(run)
    body = d.labelled("Step {i}")
    assert "succeeded" in body.classes and body.lines[0] == "10/10 succeeded"
    loop = next(n for n in d.nodes.values() if "loop" in n.classes)
    assert loop.lines[:1] == ["10 iterations"]
    back = [e for e in d.edges if e.source == body.id and e.target == loop.id]
    assert back and "taken" in back[0].classes
    assert "not-reached" in d.nodes["Extra"].classes
    assert connected(d, "start", "end")
    assert_untaken_are_grey(d)


def test_a_graph_loop_takes_its_back_edge():
    run = pw.start_workflow("loops", {"times": 3})
    d = drawing(run)
    assert "taken" in d.edge("visit", "visit").classes
    assert connected(d, "$start", "$end")


def test_failures_among_many_are_counted():
    run = pw.start_workflow("fan_out", {"numbers": list(range(5))})
    WorkflowStep.objects.filter(run=run, step_name__in=["Double 1", "Double 3"]).update(
        status="failed", error={"message": "boom"})
    node = drawing(run).labelled("Double {n}")
    assert node.lines[0] == "2 failed of 5" and "failed" in node.classes


def test_a_graph_runs_branch_and_for_each():
    run = pw.start_workflow("team_onboarding", {"email": "ada@example.com", "name": "Ada",
                                                "team": ["bo", "cy"]})
    assert run.status == "completed"
    d = drawing(run)
    assert "not-reached" in d.nodes["reject"].classes
    assert "untaken" in d.edge("review", "reject").classes
    assert "taken" in d.edge("review", "activate").classes
    assert d.nodes["invite"].lines[0] == "2/2 succeeded"
    assert connected(d, "$start", "$end")
    for node in ("welcome", "todos", "invite"):
        assert connected(d, "$start", node) and connected(d, node, "$end")
    assert_untaken_are_grey(d)


def test_a_step_waiting_to_retry_is_amber_with_its_time():
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})
    # Attempt 1 failed, attempt 2 is due in 30 seconds: how a live run waits for a retry.
    due = timezone.now() + timedelta(seconds=30)
    WorkflowRun.objects.filter(pk=run.pk).update(status="running", output=None)
    WorkflowStep.objects.filter(run=run).update(
        status="failed", wake_at=due, attempt_count=1,
        error={"message": "transient failure on attempt 1", "type": "ConnectionError"})
    node = drawing(run).nodes["Flaky"]
    assert "retrying" in node.classes and "failed" not in node.classes
    assert node.lines[0] == f"retrying at {when(due)}"
    assert "transient failure on attempt 1" in node.tooltip
    # Once the run is over, a failed step is failed (red), whatever its wake_at.
    WorkflowRun.objects.filter(pk=run.pk).update(status="failed")
    assert "failed" in drawing(run).nodes["Flaky"].classes


def test_a_retried_step_shows_its_attempts():
    run = pw.start_workflow("retrying", {"fail_times": 2, "retries": 3})
    node = drawing(run).nodes["Flaky"]
    assert "succeeded" in node.classes and "3 attempts" in node.lines


def test_wake_times_are_never_cut():
    now = timezone.now()
    later_today = now.replace(hour=23, minute=59, second=1) if now.hour < 23 else now
    assert when(later_today, now) == timezone.localtime(later_today).strftime("%H:%M:%S")
    tomorrow = now + timedelta(days=1)
    local = timezone.localtime(tomorrow)
    assert when(tomorrow, now) == f"{local:%b} {local.day} {local:%H:%M}"
    with fake_clock():
        sleeping = pw.start_workflow("sleeps_a_week", {}, inline=False)
        from pikku_workflows.runtime.orchestrator import run_pass

        run_pass(sleeping.pk)
        node = drawing(sleeping).nodes["A week"]
    assert node.badge == "sleep"
    assert any("wakes" in line for line in node.lines)
    assert all(not line.endswith("…") for line in node.lines)
    assert "wakes at 20" in node.tooltip  # the full date in the tooltip


def test_labels_keep_their_punctuation():
    with registry.isolated():
        @pw.workflow(name="punctuated")
        def punctuated(wf, data):
            wf.approval("sign-off_by the C.F.O.")

        graph = analyse_workflow(punctuated).graph
        gate = next(n for n in graph["nodes"] if n["kind"] == "approval")
        assert gate["label"] == "sign-off_by the C.F.O."
        run = pw.start_workflow("punctuated", {})
        node = drawing(run).nodes[gate["id"]]
        svg = run_svg(WorkflowRun.objects.get(pk=run.pk))
    assert node.label == "sign-off_by the C.F.O." and node.badge == "approval"
    # Nothing shown (texts, tooltips) names the engine's key; data-node and data-edge,
    # for tools, keep the node's id.
    shown = [el.text or "" for el in ET.fromstring(svg).iter()
             if el.tag in (f"{SVG}text", f"{SVG}title")]
    assert shown and not any("__workflow" in text for text in shown)
    assert all("__workflow" not in text for text in (node.label, node.tooltip, *node.lines))


def test_the_overlay_costs_two_queries_plus_one_for_deciders(django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "b@example.com", "pw")
    run = pw.start_workflow("needs_approval", {})
    pw.approve_step(run.pk, "Manager sign-off", {"approved": True}, user=boss)
    run = WorkflowRun.objects.get(pk=run.pk)
    with CaptureQueriesContext(connection) as captured:
        run_svg(run)
    assert len(captured) <= 2  # the steps, the usernames


def test_a_compensation_runs_on_from_the_failed_step_to_the_end():
    run = pw.start_workflow("compensated", {"order": 1, "retries": 0})
    assert run.status == "failed"
    d = drawing(run)
    assert "failed" in d.nodes["Charge"].classes
    compensation = d.nodes["Charge:onError"]
    assert compensation.label == "on error of Charge" and "succeeded" in compensation.classes
    assert "taken" in d.edge("Charge", "Charge:onError").classes
    assert "taken" in d.edge("Charge:onError", "end").classes
    assert connected(d, "start", "end")
    assert_untaken_are_grey(d)


def test_a_literal_parallel_call_takes_every_call():
    with registry.isolated():
        @pw.workflow(name="two_calls")
        def two_calls(wf, data):
            first, second = wf.parallel([("A", "echo", 1), ("B", "echo", 2)])
            return wf.do("Sum", "echo", first + second)

        run = pw.start_workflow("two_calls", {})
        d = drawing(run)
    parallel = next(n for n in d.nodes.values() if "parallel" in n.classes)
    assert "taken" in d.edge(parallel.id, "A").classes
    assert "taken" in d.edge(parallel.id, "B").classes
    assert parallel.lines[0] == "2/2 succeeded"
    assert connected(d, "start", "end")
    # Both calls lead on to the step after them (the second only finished last).
    assert connected(d, "A", "end") and connected(d, "B", "end")


def test_a_definition_says_what_its_gates_and_sleeps_do():
    from pikku_workflows.admin.graph_svg import definition_svg

    graph = registry.workflow("order_saga").analysis.graph
    d = parse(definition_svg(registry.workflow("order_saga")), graph)
    gate = d.nodes["__workflow_approval:Manager sign-off"]
    assert gate.label == "Manager sign-off" and gate.badge == "approval"
    assert gate.lines == ["approvers: not-initiator", "expires after 3d"]  # four eyes
    assert d.nodes["Cool-off"].badge == "sleep"
    assert all("taken" not in e.classes and "untaken" not in e.classes for e in d.edges)
