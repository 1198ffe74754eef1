"""Forks (``fork_run``): rerun a finished run from a step on today's code, keeping the steps
recorded before it; the prefix check; the source never changes."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import pikku_workflows as pw
from pikku_workflows import operations
from pikku_workflows.engine import approvals, store
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from tests.testapp.shared import CALLS
from tests.unit.workflows_forks import FLAGS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fork_flags")]


def steps_of(run):
    return {s.step_name: s for s in WorkflowStep.objects.filter(run_id=run.pk).order_by("id")}


def snapshot(run):
    """Everything the source's rows say: a fork must leave it as it was."""
    return (list(WorkflowRun.objects.filter(pk=run.pk).values()),
            list(WorkflowStep.objects.filter(run=run).order_by("id").values()),
            list(StepAttempt.objects.filter(step__run=run).order_by("id").values()))


def counts():
    return (WorkflowRun.objects.count(), WorkflowStep.objects.count(),
            StepAttempt.objects.count())


def failed_order(**data):
    run = pw.start_workflow("fork_orders", data)
    assert run.status == "failed", run.error
    return run


def test_a_fork_keeps_the_steps_before_the_failed_one_and_reruns_the_rest(users):
    source = failed_order()
    assert list(steps_of(source)) == ["Reserve", "Price", "Charge", "Charge:onError"]
    before = snapshot(source)
    CALLS.clear()
    FLAGS["fixed"] = True  # the deploy that mends the bug

    fork = pw.fork_run(source.pk, reason="bug #12 fixed", user=users["staff"])

    assert fork.status == "completed", fork.error
    assert fork.output["charge"] == {"charged": True}
    # Reserve and Price kept (not called again); Charge and Ship ran on the fork.
    assert [c["data"] for c in CALLS["fork_echo"]] == [{"n": 3}]
    assert len(CALLS["fork_buggy"]) == 1
    steps = steps_of(fork)
    assert list(steps) == ["Reserve", "Price", "Charge", "Ship"]  # no compensation kept
    assert [fork.kept_step(s) for s in steps.values()] == [True, True, False, False]
    source_steps = steps_of(source)
    for name in ("Reserve", "Price"):
        kept, recorded = steps[name], source_steps[name]
        assert (kept.result, kept.status, kept.created_at, kept.updated_at) == (
            recorded.result, recorded.status, recorded.created_at, recorded.updated_at)
        assert list(kept.attempts.values_list("attempt", "status", "created_at")) == list(
            recorded.attempts.values_list("attempt", "status", "created_at"))
    assert (fork.forked_from_id, fork.fork_step, fork.fork_reason, fork.forked_by_id) == (
        source.pk, "Charge", "bug #12 fixed", users["staff"].pk)
    assert fork.owner_id == source.owner_id
    assert list(source.forks.all()) == [fork]
    assert snapshot(source) == before  # the source is never changed


def test_a_fork_takes_the_owner_of_its_source(users):
    source = pw.start_workflow("fork_orders", {}, owner=users["owner"])
    FLAGS["fixed"] = True
    fork = pw.fork_run(source.pk, user=users["staff"])
    assert (fork.owner_id, fork.forked_by_id) == (users["owner"].pk, users["staff"].pk)


def test_a_fork_from_a_chosen_step_reruns_it_and_everything_after():
    source = failed_order()
    FLAGS["fixed"] = True
    CALLS.clear()
    fork = pw.fork_run(source.pk, from_step="Price")
    assert fork.status == "completed"
    assert [c["data"] for c in CALLS["fork_echo"]] == [{"n": 2}, {"n": 3}]
    assert [s.step_name for s in steps_of(fork).values() if fork.kept_step(s)] == ["Reserve"]


def test_a_fork_with_a_new_input_replays_with_it():
    source = failed_order()
    fork = pw.fork_run(source.pk, input={"ok": True})
    assert fork.status == "completed"
    assert fork.input == {"ok": True}
    assert steps_of(fork)["Charge"].data == {"ok": True}


def test_a_completed_run_forks_from_the_start():
    FLAGS["fixed"] = True
    source = pw.start_workflow("fork_orders", {})
    assert source.status == "completed"
    CALLS.clear()
    fork = pw.fork_run(source.pk)
    assert fork.status == "completed"
    assert fork.fork_step == "Reserve"
    assert fork.fork_kept_through is None
    assert len(CALLS["fork_echo"]) == 3


def test_a_cancelled_run_forks():
    source = pw.start_workflow("two_gates", {})
    pw.cancel_run(source.pk, reason="stop")
    fork = pw.fork_run(source.pk)
    assert fork.status == "suspended"  # at its first gate again: asked anew
    assert fork.fork_step == "__workflow_suspend:Awaiting warehouse"


def test_a_fork_refused_by_the_prefix_check_writes_nothing():
    source = failed_order()
    FLAGS.update(fixed=True, renamed=True)  # "Price" is now "Price v2"
    before = counts()
    with pytest.raises(pw.WorkflowForkError) as refused:
        pw.fork_run(source.pk, reason="after the rename")
    error = refused.value
    assert (error.code, error.http_status) == ("FORK_DIVERGES", 409)
    assert (error.step_recorded, error.step_asked) == ("Price", "Price v2")
    assert "Price v2" in str(error)
    assert counts() == before
    # Rerun from a step before the change, nothing of the changed part is kept.
    assert pw.fork_run(source.pk, from_step="Reserve").status == "completed"


def test_the_prefix_check_runs_with_the_new_input():
    source = failed_order()
    before = counts()
    with pytest.raises(pw.WorkflowForkError) as refused:
        pw.fork_run(source.pk, from_step="Charge", input={"express": True, "ok": True})
    assert refused.value.step_asked == "Express"
    assert counts() == before


def version_conflicted():
    """A run suspended with VERSION_CONFLICT: "Price" renamed while it waited."""
    run = pw.start_workflow("fork_redeployed", {})
    assert run.status == "suspended"
    FLAGS["renamed"] = True
    run = pw.resume_run(run.pk)
    assert (run.status, run.error["code"]) == ("suspended", "VERSION_CONFLICT"), run.error
    return run


def test_a_run_the_deployed_code_no_longer_replays_reruns_from_where_it_diverges():
    source = version_conflicted()
    before = snapshot(source)
    CALLS.clear()

    fork = pw.fork_run(source.pk, reason="renamed Price")

    # Kept: Reserve (not called again); the cut is where today's code stops replaying.
    assert fork.fork_step == "Price"
    assert [c["data"] for c in CALLS["fork_echo"]] == [{"n": 2}]
    assert list(steps_of(fork))[:2] == ["Reserve", "Price v2"]
    assert fork.status == "suspended" and fork.error["code"] == "WORKFLOW_SUSPENDED"
    assert pw.resume_run(fork.pk).status == "completed"
    assert snapshot(source) == before  # still suspended: the operator cancels it


def test_a_rerun_from_a_step_the_code_renamed_runs_the_new_step():
    source = failed_order()
    FLAGS.update(fixed=True, renamed=True)  # "Price" is now "Price v2"
    CALLS.clear()
    fork = pw.fork_run(source.pk, from_step="Price")
    assert fork.status == "completed", fork.error
    assert list(steps_of(fork)) == ["Reserve", "Price v2", "Charge", "Ship"]
    assert [c["data"] for c in CALLS["fork_echo"]] == [{"n": 2}, {"n": 3}]


def test_only_a_terminal_run_forks():
    run = pw.start_workflow("needs_approval", {})
    assert run.status == "suspended"
    with pytest.raises(pw.WorkflowForkError) as refused:
        pw.fork_run(run.pk)
    assert (refused.value.code, refused.value.http_status) == ("FORK_NOT_TERMINAL", 409)


def test_an_unknown_step_is_refused():
    source = failed_order()
    before = counts()
    with pytest.raises(pw.WorkflowForkError) as refused:
        pw.fork_run(source.pk, from_step="Refund")
    assert (refused.value.code, refused.value.http_status) == ("FORK_UNKNOWN_STEP", 400)
    assert "Reserve" in str(refused.value)  # it lists the run's steps
    assert counts() == before


@pytest.mark.parametrize("bad", [{"input": {1, 2}}, {"reason": "x" * 1001},
                                 {"reason": "bell\x07"}, {"reason": None}])
def test_bad_input_or_reason_is_refused_before_anything_is_written(bad):
    source = failed_order()
    before = counts()
    with pytest.raises(pw.WorkflowInputError):
        pw.fork_run(source.pk, **bad)
    assert counts() == before


def test_a_compensation_as_the_step_means_its_step():
    source = failed_order()
    FLAGS["fixed"] = True
    assert pw.fork_run(source.pk, from_step="Charge:onError").fork_step == "Charge"


def test_a_parallel_call_holding_the_step_reruns_whole():
    source = pw.start_workflow("fork_fan", {})
    assert source.status == "failed"
    assert list(steps_of(source)) == ["Prepare", "Part 0", "Part 1", "Part 2"]
    FLAGS["fixed"] = True
    CALLS.clear()
    fork = pw.fork_run(source.pk, from_step="Part 1")
    assert fork.status == "completed", fork.error
    assert fork.fork_step == "Part 0"
    assert [s.step_name for s in steps_of(fork).values() if fork.kept_step(s)] == ["Prepare"]
    assert sorted(c["data"].get("i", -1) for c in CALLS["fork_echo"]) == [-1, 0, 2]
    assert fork.output["parts"] == [{"i": 0}, {"charged": True}, {"i": 2}]
    assert operations.fork_preview(source.pk, "Part 2").cut == "Part 0"
    assert operations.fork_preview(source.pk, "Part 2").moved == "parallel"
    assert operations.fork_preview(source.pk, "Prepare").kept == []


def test_child_runs_before_the_cut_are_reused_and_a_failed_one_after_it_reruns():
    source = pw.start_workflow("fork_parent", {})
    assert source.status == "failed"
    steps = steps_of(source)
    first_child = steps["First child"].child_run
    failed_child = steps["Second child"].child_run
    assert (first_child.status, failed_child.status) == ("completed", "failed")
    FLAGS["fixed"] = True
    fork = pw.fork_run(source.pk)
    assert fork.status == "completed", fork.error
    forked = steps_of(fork)
    assert forked["First child"].child_run_id == first_child.pk  # reused, not re-created
    assert WorkflowRun.objects.filter(workflow="child_ok").count() == 1
    new_child = forked["Second child"].child_run
    assert new_child.pk != failed_child.pk
    assert (new_child.parent_run_id, new_child.status) == (fork.pk, "completed")
    # The source deleted (or pruned), the child its fork reuses moves to the fork.
    store.delete_runs([source.pk])
    first_child.refresh_from_db()
    assert first_child.parent_run_id == fork.pk
    assert not WorkflowRun.objects.filter(pk=failed_child.pk).exists()
    fork.refresh_from_db()
    assert fork.forked_from_id is None
    assert steps_of(fork)["First child"].child_run_id == first_child.pk


def test_gates_at_or_after_the_cut_ask_again_and_kept_ones_keep_their_decision():
    source = pw.start_workflow("fork_gated", {})
    pw.approve_step(source.pk, "Sign-off", {"approved": True})
    source.refresh_from_db()
    assert source.status == "failed"
    gate = "__workflow_approval:Sign-off"
    assert approvals.record_key(gate) in source.state
    FLAGS["fixed"] = True
    kept_gate = pw.fork_run(source.pk)  # from Charge: the gate is kept, with its decision
    assert kept_gate.status == "completed"
    assert kept_gate.output == {"answer": "decided", "charge": {"charged": True}}
    asked_again = pw.fork_run(source.pk, from_step="approval:Sign-off")
    assert asked_again.status == "suspended"
    assert asked_again.error["code"] == "WAITING_FOR_APPROVAL"
    assert asked_again.state == {"seen": True}
    pw.approve_step(asked_again.pk, "Sign-off", {"approved": True})
    assert WorkflowRun.objects.get(pk=asked_again.pk).status == "completed"


def test_a_graph_fork_reruns_the_node_and_downstream_and_keeps_for_each_instances():
    source = pw.start_workflow("fork_graph", {"items": [1, 2]})
    assert source.status == "failed", source.error
    assert set(steps_of(source)) == {"start", "items[0]", "items[1]", "side", "mid"}
    FLAGS["fixed"] = True
    CALLS.clear()
    fork = pw.fork_run(source.pk)
    assert fork.status == "completed", fork.error
    assert fork.fork_step == "mid"
    kept = {s.step_name for s in steps_of(fork).values() if fork.kept_step(s)}
    assert kept == {"start", "items[0]", "items[1]", "side"}
    assert [c["step"] for c in CALLS["fork_echo"]] == ["end"]
    assert steps_of(fork)["mid"].data == {"values": [1, 2]}
    # From the for_each node: its instances and everything downstream rerun.
    plan = operations.fork_preview(source.pk, "items[1]")
    assert set(plan.kept) == {"start", "side"}
    assert set(plan.rerun) == {"items[0]", "items[1]", "mid"}
    assert (plan.asked, plan.cut, plan.moved) == ("items[1]", "items[0]", "node")
    CALLS.clear()
    again = pw.fork_run(source.pk, from_step="items[1]")
    assert again.status == "completed", again.error
    assert sorted(c["step"] for c in CALLS["fork_echo"]) == ["end", "items[0]", "items[1]"]


def test_a_forked_fork_links_its_own_source():
    source = failed_order()
    first = pw.fork_run(source.pk)
    assert first.status == "failed"
    FLAGS["fixed"] = True
    second = pw.fork_run(first.pk)
    assert second.status == "completed"
    assert second.forked_from_id == first.pk
    # The kept steps of a fork are kept again.
    assert [s.step_name for s in steps_of(second).values() if second.kept_step(s)] == [
        "Reserve", "Price"]


def test_a_graph_run_started_at_an_entry_node_forks_from_it():
    source = pw.start_workflow("two_doors", {"via": "api"}, start_node="api")
    assert source.status == "completed"
    fork = pw.fork_run(source.pk, from_step="done")
    assert fork.status == "completed", fork.error
    assert fork.wire["start_node"] == "api"
    assert set(steps_of(fork)) == {"api", "done"}
    assert [s.step_name for s in steps_of(fork).values() if fork.kept_step(s)] == ["api"]


def test_the_source_still_retries_on_its_own_after_a_fork():
    source = failed_order()
    FLAGS["fixed"] = True
    fork = pw.fork_run(source.pk)
    # The source, still failed, retries on its own afterwards: the fork is apart from it.
    retried = pw.retry_run(source.pk)
    assert (retried.status, fork.status) == ("completed", "completed")
    assert WorkflowStep.objects.filter(run=fork).count() == 4


def test_a_step_that_never_settled_is_not_kept():
    source = failed_order()
    # The run ended while a worker still ran "Price" (a cancel leaves a leased step to
    # its worker): its outcome is unknown, so a fork reruns from it.
    WorkflowStep.objects.filter(run=source, step_name="Price").update(status="running")
    assert operations.fork_preview(source.pk).cut == "Price"
    plan = operations.fork_preview(source.pk, "Charge")
    assert (plan.asked, plan.cut, plan.kept, plan.moved) == (
        "Charge", "Price", ["Reserve"], "unsettled")
    FLAGS["fixed"] = True
    fork = pw.fork_run(source.pk, from_step="Charge")
    assert fork.status == "completed"
    assert [s.step_name for s in steps_of(fork).values() if fork.kept_step(s)] == ["Reserve"]


def test_pruning_the_source_keeps_the_child_run_its_fork_reuses():
    source = pw.start_workflow("fork_parent", {})
    FLAGS["fixed"] = True
    fork = pw.fork_run(source.pk)
    reused = steps_of(fork)["First child"].child_run_id
    call_command("pikku_prune", "--older-than", "0s", "--status", "failed", stdout=StringIO())
    assert not WorkflowRun.objects.filter(pk=source.pk).exists()
    assert WorkflowRun.objects.get(pk=reused).parent_run_id == fork.pk
    assert steps_of(fork)["First child"].child_run_id == reused
