"""Dry replay: recorded runs through the current code, with no step called and nothing written."""

from __future__ import annotations

import re
from contextlib import contextmanager, suppress

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowVersion
from pikku_workflows.registry import registry
from pikku_workflows.runtime.dry_replay import (
    Divergence,
    DivergenceCode,
    first_divergence,
    replay,
)
from pikku_workflows.testing import fake_clock
from tests.testapp.shared import CALLS

pytestmark = pytest.mark.django_db

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@contextmanager
def nothing_called_nor_written():
    """The block calls no step function and writes no row."""
    CALLS.clear()
    with CaptureQueriesContext(connection) as queries:
        yield
    writes = [q["sql"] for q in queries.captured_queries if WRITE.match(q["sql"])]
    assert writes == []
    assert dict(CALLS) == {}


def check(run, **options):
    with nothing_called_nor_written():
        return first_divergence(WorkflowRun.objects.get(pk=run.pk), **options)


@contextmanager
def new_code(name):
    """The block registers the current code of workflow ``name`` in place of the old."""
    with registry.isolated():
        registry.unregister(name)
        yield


def keys(run):
    return list(WorkflowStep.objects.filter(run_id=run.pk).values_list("step_name", flat=True))


# --- DSL runs --------------------------------------------------------------------------------


def test_unchanged_code_replays_every_kind_of_step():
    """Steps, closures, a sleep, a suspend gate, an approval, a child run, parallel, a
    compensation and a caught failure: all answered from their records."""
    with registry.isolated():
        @pw.workflow
        def everything(wf, data):
            wf.do("Prepare", "echo", 1)
            wf.do("Closure", lambda: 2)
            wf.sleep("Nap", "1h")
            resumed = wf.suspend("Hold")
            decision = wf.approval("Sign-off")
            child = wf.do("Child", "child_ok", {"n": 2})
            both = wf.parallel([("P1", "echo", 1), ("P2", "double", 2)])
            with suppress(pw.WorkflowStepFailedError):
                wf.do("Charge", "always_fails", {"order": 1}, retries=0, on_error="refund")
            wf.set_state("seen", True)
            return {"resumed": resumed, "decision": decision["status"], "child": child,
                    "both": both, "state": wf.get_state()["seen"]}

        with fake_clock():
            run = pw.start_workflow("everything", {})
            assert run.status == "suspended", run.error
            run = pw.resume_run(run.pk, {"dock": 4})
            run = pw.approve_step(run.pk, "Sign-off", {"ok": True})
        assert run.status == "completed", run.error
        assert "Charge:onError" in keys(run)
        assert check(run) is None
        outcome = replay(WorkflowRun.objects.get(pk=run.pk))
        assert outcome.divergence is None


def test_a_renamed_step_diverges_with_the_step_recorded_and_the_step_asked():
    with registry.isolated():
        @pw.workflow
        def renames(wf, data):
            wf.do("One", "echo", 1)
            wf.do("Two", "echo", 2)
            return "done"

        run = pw.start_workflow("renames", {})
    with registry.isolated():
        @pw.workflow
        def renames(wf, data):
            wf.do("One", "echo", 1)
            wf.do("Second", "echo", 2)
            return "done"

        divergence = check(run)
    assert divergence == Divergence(
        run_id=str(run.pk), step_recorded="Two", step_asked="Second",
        code=DivergenceCode.STEP_MISMATCH, message=divergence.message)
    assert "'Second'" in divergence.message and "'Two'" in divergence.message


def test_a_step_removed_from_a_finished_run_is_reported_not_reached():
    with registry.isolated():
        @pw.workflow
        def shrinks(wf, data):
            wf.do("One", "echo", 1)
            wf.do("Two", "echo", 2)

        run = pw.start_workflow("shrinks", {})
    with registry.isolated():
        @pw.workflow
        def shrinks(wf, data):
            wf.do("One", "echo", 1)

        divergence = check(run)
    assert divergence.code == DivergenceCode.NOT_REACHED
    assert (divergence.step_recorded, divergence.step_asked) == ("Two", "")
    assert "returns without asking for step 'Two'" in divergence.message


def test_a_suspended_run_replays_when_the_code_adds_steps_after_its_gate():
    run = pw.start_workflow("two_gates", {})
    with new_code("two_gates"):
        @pw.workflow
        def two_gates(wf, data):
            first = wf.suspend("Awaiting warehouse")
            wf.do("New step", "echo", "new")
            return first

        assert check(run) is None


def test_a_step_inserted_before_a_gate_diverges():
    run = pw.start_workflow("needs_approval", {})
    with new_code("needs_approval"):
        @pw.workflow
        def needs_approval(wf, data):
            wf.do("Prepare", "echo", "prepared")
            wf.do("Check", "echo", "new")
            return wf.approval("Manager sign-off")

        divergence = check(run)
    assert (divergence.step_recorded, divergence.step_asked) == \
        ("approval:Manager sign-off", "Check")


def test_a_failed_run_replays_up_to_its_failure_and_a_body_error_is_reported():
    run = pw.start_workflow("compensated", {"order": 7, "retries": 0})
    assert run.status == "failed"
    assert check(run) is None
    with new_code("compensated"):
        @pw.workflow
        def compensated(wf, data):
            raise KeyError("order_id")

        divergence = check(run)
    assert divergence.code == DivergenceCode.NOT_REACHED
    assert "raises KeyError" in divergence.message and divergence.step_recorded == "Charge"


def test_until_stops_at_the_chosen_step_and_checks_the_prefix():
    run = pw.start_workflow("sequential", {"x": 1})
    kept = [s for s in WorkflowStep.objects.filter(run_id=run.pk) if s.step_name == "Add"]
    assert check(run, steps=kept, until="Double") is None
    # The chosen step itself, with nothing kept before it.
    assert check(run, steps=[], until="Add") is None
    # A gate chosen by its public name or its key.
    gated = pw.start_workflow("needs_approval", {})
    prepare = WorkflowStep.objects.filter(run_id=gated.pk, step_name="Prepare")
    assert check(gated, steps=prepare, until="approval:Manager sign-off") is None
    assert check(gated, steps=prepare, until="__workflow_approval:Manager sign-off") is None
    divergence = check(gated, steps=[], until="approval:Manager sign-off")
    assert (divergence.step_recorded, divergence.step_asked) == \
        ("approval:Manager sign-off", "Prepare")
    # The code asks for a step the prefix does not have before the chosen one.
    with new_code("sequential"):
        @pw.workflow
        def sequential(wf, data):
            total = wf.do("Add", "add", {"a": data["x"], "b": 1})
            wf.do("Audit", "echo", total)
            return wf.do("Double", "double", total)

        divergence = check(run, steps=kept, until="Double")
    assert (divergence.step_recorded, divergence.step_asked) == ("Double", "Audit")
    # A chosen step the code never asks for.
    with new_code("sequential"):
        @pw.workflow
        def sequential(wf, data):
            return wf.do("Add", "add", {"a": data["x"], "b": 1})

        divergence = check(run, steps=kept, until="Double")
    assert divergence.code == DivergenceCode.NOT_REACHED
    assert divergence.step_recorded == "Double"


def test_another_input_takes_another_path():
    run = pw.start_workflow("branching", {"amount": 500})
    assert check(run) is None
    divergence = check(run, input={"amount": 5})
    assert (divergence.step_recorded, divergence.step_asked) == ("Bulk discount", "Full price")


def test_a_workflow_no_longer_registered_is_reported():
    with registry.isolated():
        @pw.workflow
        def goes_away(wf, data):
            return wf.do("Only", "echo", 1)

        run = pw.start_workflow("goes_away", {})
    divergence = check(run)
    assert divergence.code == DivergenceCode.WORKFLOW_NOT_FOUND
    assert divergence.step_recorded == "Only" and "goes_away" in divergence.message


def test_a_saved_run_whose_rows_are_read_once_replays_from_given_rows():
    """``steps`` given, the replay reads nothing else of the run's steps."""
    run = pw.start_workflow("sequential", {"x": 1})
    row = WorkflowRun.objects.get(pk=run.pk)
    steps = list(WorkflowStep.objects.filter(run_id=run.pk))
    with CaptureQueriesContext(connection) as queries:
        assert first_divergence(row, steps=steps) is None
    assert len(queries) == 0


# --- graph runs ------------------------------------------------------------------------------


def test_graph_runs_replay_their_fired_nodes():
    run = pw.start_workflow("diamond", {"n": 2, "m": 3})
    assert run.status == "completed", run.error
    assert check(run) is None
    fanned = pw.start_workflow("squares", {"values": [1, 2, 3]})
    assert fanned.status == "completed", fanned.error
    assert check(fanned) is None
    assert check(fanned, steps=[s for s in WorkflowStep.objects.filter(run_id=fanned.pk)
                                if s.step_name == "numbers"], until="square[0]") is None


def test_a_graph_changed_under_a_run_diverges():
    run = pw.start_workflow("diamond", {"n": 2, "m": 3})
    with new_code("diamond"):
        pw.graph_workflow(
            "diamond",
            nodes={"a": "echo", "b": "add", "d": "add", "join": "total"},
            config={
                "a": {"next": ["b", "d"]},
                "b": {"input": {"a": pw.ref("a", "n"), "b": pw.ref("a", "n")},
                      "next": "join"},
                "d": {"input": {"a": pw.ref("a", "m"), "b": pw.ref("a", "m")},
                      "next": "join"},
                "join": {"input": {"values": [pw.ref("b"), pw.ref("d")]}},
            },
            output="join",
        )
        divergence = check(run)
        assert (divergence.step_recorded, divergence.step_asked) == ("c", "d")
        # Replayed as a pass would resume it, the run follows its stored version...
        assert check(run, as_resumed=True) is None
        # ...which, deleted, is reported.
        WorkflowVersion.objects.filter(workflow="diamond", graph_hash=run.graph_hash).delete()
        divergence = check(run, as_resumed=True)
    assert divergence.code == DivergenceCode.VERSION_NOT_FOUND
    assert "not stored" in divergence.message


@pytest.mark.parametrize(("workflow", "data"), [
    ("graph_on_error", {"order": 5}),                    # a failed node and its on_error
    ("deadlocks", {"branch": "x"}),                      # a keyed branch, then a deadlock
    ("graph_with_child", {"n": 2}),                      # a child run, a suspended child
    ("squares_in_order", {"values": [1, 2, 3]}),         # a sequential for_each
])
def test_graph_runs_of_every_shape_replay(workflow, data):
    run = pw.start_workflow(workflow, data)
    assert keys(run)
    assert check(run) is None


def test_the_dry_unit_of_work_refuses_every_write():
    from pikku_workflows.runtime.dry_replay import DryReplayWriteError, _NeverWrites

    run = pw.start_workflow("sequential", {"x": 1})
    work = _NeverWrites(run)
    step = WorkflowStep.objects.filter(run_id=run.pk).first()
    writes = [lambda: work.ensure_step({}, "X"), work.release_lease,
              lambda: work.finish_run("completed"), lambda: work.begin_attempt(step),
              lambda: work.save_new_step(step), lambda: work.writing()]
    with nothing_called_nor_written():
        for write in writes:
            with pytest.raises(DryReplayWriteError, match="tried to write"):
                write()
        work.flush()
