"""What the run graph SVG shows: its overlay, read from the drawing's attributes, and a
drawing whose geometry holds (``graph_corpus.problems``: no edge through a node, no label
on one, no overlapping nodes); the layout itself is tested in ``test_graph_layout``, the
overlay rule by rule in ``test_graph_overlay``."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.admin.graph_svg import definition_svg, run_svg, step_anchor
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock
from tests.admin.graph_corpus import problems, read

pytestmark = pytest.mark.django_db


def check_drawing(workflow: str, svg: str) -> None:
    """The drawing holds and names every node and edge of the workflow's graph."""
    assert problems(svg) == []
    graph = registry.workflow(workflow).analysis.graph
    geometry = read(svg)
    assert set(geometry.nodes) == {n["id"] for n in graph["nodes"]}
    assert sorted(e.name for e in geometry.edges) == sorted(
        f"{e['source']}->{e['target']}" for e in graph["edges"])


def test_a_branching_dsl_run():
    run = pw.start_workflow("branching", {"amount": 500})
    svg = run_svg(run)
    check_drawing("branching", svg)
    assert 'class="node step succeeded"' in svg and 'data-node="Bulk discount"' in svg
    assert 'class="edge branch taken"' in svg and 'class="edge branch untaken"' in svg
    assert 'class="node step not-reached" data-node="Full price"' in svg


def test_a_graph_for_each_run():
    run = pw.start_workflow("queued_graph", {"values": [1, 2, 3]})
    svg = run_svg(run)
    check_drawing("queued_graph", svg)
    assert "3/3 succeeded" in svg


def test_a_failed_run_with_retries():
    run = pw.start_workflow("retrying", {"fail_times": 5, "retries": 2})
    svg = run_svg(run)
    check_drawing("retrying", svg)
    assert 'class="node step failed"' in svg and "3 attempts" in svg
    assert "error: transient failure on attempt 3" in svg  # the tooltip


def test_a_run_with_a_child_run():
    run = pw.start_workflow("parent", {"child": "child_ok"})
    child = WorkflowRun.objects.get(parent_run=run)
    svg = run_svg(run)
    check_drawing("parent", svg)
    assert f'href="/admin/pikku_workflows/workflowrun/{child.pk}/change/"' in svg


def test_sleeps_show_their_wake_time_and_approvals_who_decided(django_user_model):
    manager = django_user_model.objects.create_superuser("boss", "b@example.com", "pw")
    with fake_clock():
        sleeping = pw.start_workflow("sleeps_a_week", {}, inline=False)
        from pikku_workflows.runtime.orchestrator import run_pass

        run_pass(sleeping.pk)
    assert "wakes " in run_svg(WorkflowRun.objects.get(pk=sleeping.pk))
    gated = pw.start_workflow("needs_approval", {})
    pw.approve_step(gated.pk, "Manager sign-off", {"ok": 1}, user=manager)
    drawn = run_svg(WorkflowRun.objects.get(pk=gated.pk))
    assert "decided by boss" in drawn and f"user {manager.pk}" not in drawn


def test_user_text_is_escaped():
    with registry.isolated():
        @pw.function(retries=0)
        def explode(data):
            raise ValueError("<script>alert(1)</script>")

        @pw.workflow(name="xss_flow")
        def xss_flow(wf, data):
            wf.do("<img src=x onerror=alert(1)>", explode, {})

        run = pw.start_workflow("xss_flow", {})
        svg = run_svg(run)
    assert "<script>" not in svg and "<img" not in svg
    assert "&lt;script&gt;" in svg and "&lt;img src=x" in svg


def test_unknown_regions_cycles_and_old_versions():
    svg = definition_svg(registry.workflow("caught_failure"))
    assert 'class="node unknown"' in svg
    looping = pw.start_workflow("loops", {"times": 3})
    assert 'class="edge loop taken"' in run_svg(looping)
    run = pw.start_workflow("sequential", {"x": 1})
    WorkflowRun.objects.filter(pk=run.pk).update(graph_hash="0ldversion00")
    from pikku_workflows.models import WorkflowVersion

    WorkflowVersion.objects.create(workflow="sequential", graph_hash="0ldversion00",
                                   source="dsl", graph={"nodes": [
                                       {"id": "start", "kind": "start", "label": "start"},
                                       {"id": "Old step", "kind": "step", "label": "Old step",
                                        "step_name": "Old step"},
                                       {"id": "end", "kind": "end", "label": "end"}],
                                       "edges": [{"source": "start", "target": "Old step"},
                                                 {"source": "Old step", "target": "end"}]})
    assert 'data-node="Old step"' in run_svg(WorkflowRun.objects.get(pk=run.pk))


def test_nodes_link_to_their_step_and_the_drawing_costs_a_bounded_number_of_queries():
    small = pw.start_workflow("fan_out", {"numbers": [1]})
    big = pw.start_workflow("fan_out", {"numbers": list(range(60))})
    assert f'href="#{step_anchor("Double 1")}"' in run_svg(small)
    counts = []
    for run in (small, big):
        with CaptureQueriesContext(connection) as captured:
            run_svg(run)
        counts.append(len(captured))
    assert counts[0] == counts[1] <= 2
    assert WorkflowStep.objects.filter(run=big).count() == 60


def test_the_command_prints_the_same_svg():
    run = pw.start_workflow("branching", {"amount": 5})
    out = StringIO()
    call_command("pikku_graph", "branching", "--run", str(run.pk), "--format", "svg", stdout=out)
    assert out.getvalue().strip() == run_svg(run)
    out = StringIO()
    call_command("pikku_graph", "branching", "--format", "svg", stdout=out)
    assert out.getvalue().strip() == definition_svg(registry.workflow("branching"))
