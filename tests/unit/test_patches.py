"""``wf.patched``: runs recorded before a patch keep the old path, new runs take the new one,
and the live runs still without a patch are found by dry replays."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.replay_checks import live_runs_without_patches
from pikku_workflows.runtime.dry_replay import first_divergence, replay

pytestmark = pytest.mark.django_db


def keys(run):
    return list(WorkflowStep.objects.filter(run_id=run.pk).values_list("step_name", flat=True))


def old_code():
    @pw.workflow
    def shipping(wf, data):
        wf.do("Pack", "echo", "pack")
        wf.suspend("Courier")
        return wf.do("Ship", "echo", "ship")


def patched_code():
    @pw.workflow
    def shipping(wf, data):
        wf.do("Pack", "echo", "pack")
        if wf.patched("check-address"):
            wf.do("Check address", "echo", "check")
        wf.suspend("Courier")
        return wf.do("Ship", "echo", "ship")


def test_a_run_recorded_before_the_patch_keeps_the_old_path_and_a_new_run_takes_the_new():
    with registry.isolated():
        old_code()
        before = pw.start_workflow("shipping", {})
    assert before.status == "suspended"
    with registry.isolated():
        patched_code()
        after = pw.start_workflow("shipping", {})
        assert keys(after) == ["Pack", "__workflow_patch:check-address", "Check address",
                               "__workflow_suspend:Courier"]
        marker = WorkflowStep.objects.get(run_id=after.pk,
                                          step_name="__workflow_patch:check-address")
        assert (marker.status, marker.data) == ("succeeded", {"patch": "check-address"})
        # The dry replay sees the same: the old run skips the patch, the new one takes it.
        assert replay(WorkflowRun.objects.get(pk=before.pk)).patches_skipped == \
            {"check-address"}
        assert replay(WorkflowRun.objects.get(pk=after.pk)).patches_taken == {"check-address"}
        assert [r.patch_id for r in live_runs_without_patches("shipping").patches] == \
            ["check-address"]
        assert live_runs_without_patches("shipping").patches[0].runs_without == \
            [str(before.pk)]

        before = pw.resume_run(before.pk, "van 1")
        after = pw.resume_run(after.pk, "van 2")
        assert before.status == after.status == "completed"
        assert keys(before) == ["Pack", "__workflow_suspend:Courier", "Ship"]
        assert "Check address" in keys(after)
        assert first_divergence(before) is None and first_divergence(after) is None
        assert live_runs_without_patches("shipping").patches[0].runs_without == []
    # Once no live run lacks it, the call can go: the marker is not in the recorded order.
    with registry.isolated():
        @pw.workflow
        def shipping(wf, data):
            wf.do("Pack", "echo", "pack")
            wf.do("Check address", "echo", "check")
            wf.suspend("Courier")
            return wf.do("Ship", "echo", "ship")

        assert first_divergence(WorkflowRun.objects.get(pk=after.pk)) is None


def test_a_patch_reached_for_the_first_time_on_resume_takes_the_new_path():
    with registry.isolated():
        old_code()
        run = pw.start_workflow("shipping", {})
    with registry.isolated():
        @pw.workflow
        def shipping(wf, data):
            wf.do("Pack", "echo", "pack")
            wf.suspend("Courier")
            if wf.patched("insure"):
                wf.do("Insure", "echo", "insure")
            return wf.do("Ship", "echo", "ship")

        run = pw.resume_run(run.pk, "van")
    assert run.status == "completed"
    assert keys(run)[2:] == ["__workflow_patch:insure", "Insure", "Ship"]
    detail = pw.get_run_status(run.pk)
    marker = next(s for s in detail["steps"] if s["name"] == "patch:insure")
    assert marker["kind"] == "patch"


@pytest.mark.parametrize("bad", ["", "  ", None, 3, "a\nb", "x" * 300])
def test_a_bad_patch_id_fails_the_run_clearly(bad):
    with registry.isolated():
        @pw.workflow
        def bad_patch(wf, data):
            wf.patched(data["id"])

        run = pw.start_workflow("bad_patch", {"id": bad})
    assert run.status == "failed"
    assert run.error["code"] == "DEFINITION_ERROR"
    assert "patch id" in run.error["message"]
    assert keys(run) == []


def test_step_names_may_not_take_the_form_of_a_patch_marker():
    with registry.isolated():
        @pw.workflow
        def sneaky(wf, data):
            wf.do("patch:check-address", "echo", 1)

        run = pw.start_workflow("sneaky", {})
    assert run.status == "failed" and "reserved" in run.error["message"]


def test_the_step_graph_draws_a_patch_as_the_branch_it_decides():
    from pikku_workflows.analysis import analyse_workflow, patch_ids

    with registry.isolated():
        patched_code()
        fn = registry.workflow("shipping").fn
    graph = analyse_workflow(fn).graph
    assert "unknown" not in {node["kind"] for node in graph["nodes"]}
    assert any(edge["label"] == "wf.patched('check-address')" for edge in graph["edges"])
    assert patch_ids(fn) == ["check-address"]
