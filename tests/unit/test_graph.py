"""Graph workflows: definitions, the planner, branches, fan-out, joins, cycles, versions."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock
from tests.testapp.shared import CALLS

pytestmark = pytest.mark.django_db


def steps_of(run):
    return {s.step_name: s for s in WorkflowStep.objects.filter(run_id=run.pk)}


def test_linear_parallel_and_keyed_branch_approved():
    run = pw.start_workflow("user_onboarding", {"email": "ada@example.com", "name": "Ada",
                                                "ok": True})
    assert run.status == "completed"
    steps = steps_of(run)
    assert set(steps) == {"create_profile", "welcome", "review", "activate"}
    assert steps["welcome"].data == {"to": "ada@example.com", "subject": "Welcome Ada!"}
    assert steps["review"].branch_taken == "approved"
    assert steps["activate"].from_step_name == "review"
    assert steps["welcome"].from_step_name == "create_profile"
    # No output node: every sink node of the definition, None for the branch not taken.
    assert run.output == {
        "welcome": {"sent_to": "ada@example.com", "subject": "Welcome Ada!"},
        "activate": {"activated": 7},
        "reject": None,
    }


def test_keyed_branch_rejected():
    run = pw.start_workflow("user_onboarding", {"email": "bo@example.com", "name": "Bo",
                                                "ok": False})
    steps = steps_of(run)
    assert "activate" not in steps and steps["reject"].data == {"rejected": "bo@example.com"}
    assert steps["review"].branch_taken == "rejected"


def test_fan_out_and_join_fire_the_join_once():
    run = pw.start_workflow("diamond", {"n": 2, "m": 5})
    assert run.status == "completed" and run.output == 14
    steps = steps_of(run)
    assert set(steps) == {"a", "b", "c", "join"}
    assert steps["join"].data == {"values": [4, 10]}
    assert len(CALLS["total"]) == 1


def test_for_each_parallel_gives_downstream_the_ordered_list():
    run = pw.start_workflow("squares", {"values": [3, 1, 2]})
    assert run.status == "completed"
    steps = steps_of(run)
    assert [steps[f"square[{i}]"].data for i in range(3)] == [3, 1, 2]
    assert steps["sum"].data == {"values": [9, 1, 4]}
    assert run.output == {"sum": 14}


def test_for_each_sequential_runs_one_item_at_a_time_in_order():
    run = pw.start_workflow("squares_in_order", {"values": [4, 5, 6]})
    assert run.status == "completed" and run.output == {"sum": 77}
    assert [c["data"] for c in CALLS["square"]] == [4, 5, 6]
    ordered = list(WorkflowStep.objects.filter(run_id=run.pk).values_list("step_name", flat=True))
    assert ordered == ["square[0]", "square[1]", "square[2]", "sum"]


def test_empty_for_each_completes_at_once():
    run = pw.start_workflow("squares", {"values": []})
    assert run.status == "completed"
    assert steps_of(run)["sum"].data == {"values": []}
    assert CALLS["square"] == []


def test_a_non_list_for_each_source_fails_clearly():
    run = pw.start_workflow("squares", {"values": {"not": "a list"}})
    assert run.status == "failed" and run.error["code"] == "GRAPH_NODE_FAILED"
    assert "resolved to dict, expected a list" in run.error["message"]
    assert "square" in run.error["message"]


def test_bounded_cycle_creates_numbered_instances_with_lineage():
    run = pw.start_workflow("loops", {"times": 3})
    assert run.status == "completed" and run.output == {"visits": 3}
    steps = steps_of(run)
    assert [k for k in steps if k.startswith("visit")] == ["visit", "visit#1", "visit#2"]
    assert steps["visit"].from_step_name == "begin"
    assert steps["visit#1"].from_step_name == "visit"
    assert steps["visit#2"].from_step_name == "visit#1"
    assert steps["finish"].from_step_name == "visit#2"


def test_on_error_fires_once_after_exhaustion_and_the_run_fails():
    run = pw.start_workflow("graph_on_error", {"order": 5})
    assert run.status == "failed" and run.error["code"] == "GRAPH_NODE_FAILED"
    assert run.error["step"] == "charge"
    assert len(CALLS["always_fails"]) == 2  # retries=1: exactly two attempts
    assert [c["data"] for c in CALLS["refund"]] == [
        {"error": {"message": "card declined for 5", "type": "ValueError"},
         "input": {"order": 5}}]
    steps = steps_of(run)
    assert steps["cleanup"].from_step_name == "charge" and "after" not in steps


def test_deadlock_is_detected_and_names_the_waiting_node():
    run = pw.start_workflow("deadlocks", {"branch": "x"})
    assert run.status == "failed" and run.error["code"] == "GRAPH_DEADLOCK"
    assert "'right' waits for 'left'" in run.error["message"]


def test_start_node_only_at_declared_entries():
    run = pw.start_workflow("two_doors", {"via": "api"}, start_node="api")
    assert set(steps_of(run)) == {"api", "done"}
    assert steps_of(run)["done"].from_step_name == "api"
    with pytest.raises(pw.WorkflowInputError, match="'done' is not a declared entry node"):
        pw.start_workflow("two_doors", {}, start_node="done")
    with pytest.raises(pw.WorkflowInputError, match="not a graph workflow"):
        pw.start_workflow("sequential", {"x": 1}, start_node="Add")
    assert WorkflowRun.objects.filter(workflow="two_doors").count() == 1


def test_output_node():
    assert pw.run_to_completion("diamond", {"n": 1, "m": 1}) == 4


def test_child_workflow_nodes_and_a_suspended_child():
    run = pw.start_workflow("graph_with_child", {"n": 4})
    steps = steps_of(run)
    assert steps["child"].result == {"child_got": 8}
    child = WorkflowRun.objects.get(parent_run=run, workflow="child_suspends")
    assert child.status == "suspended" and WorkflowRun.objects.get(pk=run.pk).status == "running"
    pw.resume_run(child.pk, "go")
    run = WorkflowRun.objects.get(pk=run.pk)
    assert run.status == "completed" and run.output == {"gate": {"resumed_with": "go"}}


@pytest.mark.parametrize(("nodes", "config", "message"), [
    ({}, None, "non-empty"),
    ({"a": "echo"}, {"b": {}}, "unknown node 'b'"),
    ({"a": "echo"}, {"a": {"next": "zz"}}, "node 'a': next names unknown node 'zz'"),
    ({"a": "echo"}, {"a": {"input": {"x": pw.ref("ghost")}}}, "unknown node 'ghost'"),
    ({"a": "echo", "b": "echo"}, {"a": {"next": "b", "on_error": "nope"}}, "on_error"),
    ({"a": "echo"}, {"a": {"mode": "sequential"}}, "mode is only valid with for_each"),
    ({"a": "echo"}, {"a": {"for_each": pw.ref("trigger"), "mode": "random"}}, "mode must"),
    ({"a": "echo"}, {"a": {"for_each": "trigger"}}, "for_each must be a ref"),
    ({"a": "echo", "b": "echo"}, {"a": {"next": "b"}, "b": {"next": "a"}}, "no entry node"),
    ({"a": "echo"}, {"a": {"colour": "red"}}, "unknown config key"),
    ({"a": "echo"}, {"a": {"retries": -2}}, "retries"),
    ({"a": "echo"}, {"a": {"retry_delay": "soon"}}, "retry_delay"),
    ({"a": 3}, None, "must name a function"),
    # A cycle nothing can leave used to run until (slowly) the instance cap.
    ({"s": "echo", "a": "echo", "b": "echo"},
     {"s": {"next": "a"}, "a": {"next": "b"}, "b": {"next": "a"}},
     r"the cycle through 'a', 'b' has no exit"),
    ({"s": "echo", "a": "echo"}, {"s": {"next": "a"}, "a": {"next": "a"}},
     r"the cycle through 'a' has no exit"),
    # Ids that would alias instance keys used to make the planner spin forever.
    ({"a#1": "echo"}, None, r"node id 'a#1' contains the character\(s\) #"),
    ({"b[0]": "echo"}, None, r"node id 'b\[0\]' contains the character\(s\) \[ \]"),
    ({"$x": "echo"}, None, r"node id '\$x' contains a leading '\$'"),
])
def test_definition_errors_name_the_node(nodes, config, message):
    with registry.isolated(), pytest.raises(pw.WorkflowDefinitionError, match=message):
        pw.graph_workflow("broken", nodes, config)


def test_entry_node_with_dependencies_is_rejected():
    with registry.isolated(), pytest.raises(pw.WorkflowDefinitionError, match="entry node"):
        pw.graph_workflow("bad_entry", {"a": "echo", "b": "echo"},
                          {"a": {"input": {"x": pw.ref("b")}}}, entry=["a", "b"])


def test_hash_ignores_notes_description_and_tags():
    with registry.isolated():
        one = pw.graph_workflow("h1", {"a": "echo", "b": "echo"}, {"a": {"next": "b"}})
        two = pw.graph_workflow("h2", {"a": "echo", "b": "echo"},
                                {"a": {"next": "b", "notes": "explained"}},
                                description="described", tags=["x"])
        three = pw.graph_workflow("h3", {"a": "echo", "b": "double"}, {"a": {"next": "b"}})
    assert one.graph_hash == two.graph_hash != three.graph_hash


def test_drawing_has_the_dsl_graph_shape():
    graph = registry.workflow("user_onboarding").analysis.graph
    ids = [n["id"] for n in graph["nodes"]]
    assert ids[0] == "$start" and ids[-1] == "$end"
    assert {"kind", "label", "step_name", "rpc_name", "dynamic"} <= set(graph["nodes"][1])
    branch_edges = {(e["source"], e["target"], e["label"]) for e in graph["edges"]
                    if e["kind"] == "branch"}
    assert branch_edges == {("review", "activate", "approved"), ("review", "reject", "rejected")}
    loops = registry.workflow("loops").analysis.graph
    assert any(e["kind"] == "loop" and e["source"] == e["target"] == "visit"
               for e in loops["edges"])
    fanned = next(n for n in registry.workflow("squares").analysis.graph["nodes"]
                  if n["id"] == "square")
    assert fanned["dynamic"] and fanned["for_each"] == {"$ref": "numbers", "path": "values"}


def test_a_changed_definition_mid_run_continues_on_the_stored_version():
    run = pw.start_workflow("graph_with_child", {"n": 1})
    child = WorkflowRun.objects.get(parent_run=run, workflow="child_suspends")
    with registry.isolated():
        registry.unregister("graph_with_child")
        pw.graph_workflow("graph_with_child", {"prepare": "echo", "other": "double"},
                          {"prepare": {"next": "other"}})
        pw.resume_run(child.pk, "v1 still")
    run = WorkflowRun.objects.get(pk=run.pk)
    assert run.status == "completed" and run.output == {"gate": {"resumed_with": "v1 still"}}
    assert "other" not in steps_of(run)


def test_a_changed_definition_without_its_stored_version_fails():
    run = pw.start_workflow("graph_with_child", {"n": 1})
    child = WorkflowRun.objects.get(parent_run=run, workflow="child_suspends")
    WorkflowVersion.objects.filter(workflow="graph_with_child").delete()
    with registry.isolated():
        registry.unregister("graph_with_child")
        pw.graph_workflow("graph_with_child", {"prepare": "echo"})
        pw.resume_run(child.pk, "x")
    run = WorkflowRun.objects.get(pk=run.pk)
    assert run.status == "failed" and run.error["code"] == "VERSION_NOT_FOUND"


def test_graph_version_row_stores_the_definition():
    pw.start_workflow("diamond", {"n": 1, "m": 1})
    version = WorkflowVersion.objects.get(workflow="diamond")
    assert version.source == "graph"
    assert set(version.graph["definition"]["nodes"]) == {"a", "b", "c", "join"}
    assert version.graph_hash == registry.workflow("diamond").graph_hash


def test_inline_graph_nodes_retry():
    with registry.isolated():
        pw.graph_workflow("retrying_graph", {"f": "flaky"},
                          {"f": {"input": {"fail_times": 2}, "retries": 2}})
        run = pw.start_workflow("retrying_graph", {})
    assert run.status == "completed" and run.output == {"f": {"ok": True, "attempt": 3}}


def test_a_wave_that_changes_nothing_ends_the_run(monkeypatch):
    """The planner's safety net: re-firing a finished instance must not spin forever."""
    from pikku_workflows.graph.planner import Firing, Plan, Planner

    real_plan = Planner.plan

    def stuck_plan(self, widths):
        if "a" in self.known:  # "a" finished: fire it again
            return Plan(to_fire=[Firing(node="a", key="a", from_step=None)])
        return real_plan(self, widths)

    monkeypatch.setattr(Planner, "plan", stuck_plan)
    with registry.isolated():
        pw.graph_workflow("stuck", {"a": "echo"})
        run = pw.start_workflow("stuck", {"x": 1})
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error["code"] == "GRAPH_DEADLOCK"
    assert "made no progress: firing a changed no step" in run.error["message"]


def test_a_node_waiting_for_a_delayed_retry_keeps_the_run_going():
    """The run used to complete at once with output {} while its node waited to retry."""
    with fake_clock() as clock:
        started = clock.now()
        run = pw.start_workflow("graph_retry_after_delay", {"fail_times": 1})
    run.refresh_from_db()
    assert run.status == "completed"
    assert run.output == {"charged": {"ok": True, "attempt": 2}}
    attempts = StepAttempt.objects.filter(step__run=run, step__step_name="charge")
    first, second = attempts.order_by("attempt")
    assert (first.status, second.status) == ("failed", "succeeded")
    assert second.running_at >= first.failed_at + timedelta(seconds=5) > started


def test_the_default_output_has_the_same_keys_whatever_the_data():
    """An empty for_each used to leak its source node into the output."""
    with registry.isolated():
        pw.graph_workflow("fan_sink", {"numbers": "echo", "square": "echo"}, {
            "numbers": {"next": "square"},
            "square": {"for_each": pw.ref("numbers", "values"),
                       "input": {"x": pw.ref("$item")}},
        })
        full = pw.start_workflow("fan_sink", {"values": [1, 2]})
        empty = pw.start_workflow("fan_sink", {"values": []})
    full.refresh_from_db()
    empty.refresh_from_db()
    assert (full.status, empty.status) == ("completed", "completed")
    assert set(full.output) == set(empty.output) == {"square"}
    assert empty.output == {"square": []} and len(full.output["square"]) == 2


def test_reaching_the_instance_limit_fails_the_run_with_its_own_code(monkeypatch):
    from pikku_workflows.graph import runner

    monkeypatch.setattr(runner, "MAX_INSTANCES", 20)
    with registry.isolated():
        @pw.function(retries=0)
        def round_again(data, ctx):
            ctx.branch("again")

        pw.graph_workflow("endless", {"begin": "echo", "spin": "round_again", "out": "echo"},
                          {"begin": {"next": "spin"},
                           "spin": {"next": {"again": "spin", "done": "out"}}})
        run = pw.start_workflow("endless", {})
    run.refresh_from_db()
    assert run.status == "failed" and run.error["code"] == "GRAPH_INSTANCE_LIMIT"
    assert "reached 21 node instances; the limit is 20" in run.error["message"]


def test_nodes_may_be_named_start_and_end():
    """Pikku's own examples name a node "start"; the drawing's markers are namespaced."""
    with registry.isolated():
        graph = pw.graph_workflow("named_like_markers", {"start": "echo", "end": "echo"},
                                  {"start": {"next": "end"}})
        run = pw.start_workflow("named_like_markers", {"x": 1})
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"end": {}}
    drawn = graph.analysis.graph
    ids = [n["id"] for n in drawn["nodes"]]
    assert ids == ["$start", "start", "end", "$end"]
    assert {(e["source"], e["target"]) for e in drawn["edges"]} == {
        ("$start", "start"), ("start", "end"), ("end", "$end")}
