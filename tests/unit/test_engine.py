"""The replay engine running workflows inline: steps, retries, compensation, control flow."""

from __future__ import annotations

import uuid

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.steps import invocation_id
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.testapp.models import Ledger
from tests.testapp.shared import CALLS

pytestmark = pytest.mark.django_db


def steps_of(run):
    return {s.step_name: s for s in WorkflowStep.objects.filter(run_id=run.pk)}


def test_sequential_run_records_each_step_and_output():
    run = pw.start_workflow("sequential", {"x": 4})
    assert run.status == "completed"
    assert run.output == {"total": 5, "doubled": 10}
    steps = steps_of(run)
    assert list(steps) == ["Add", "Double"]
    assert steps["Add"].result == 5 and steps["Add"].rpc_name == "add"
    assert steps["Double"].from_step_name == "Add"
    assert all(s.status == "succeeded" and s.attempt_count == 1 for s in steps.values())
    assert run.finished_at is not None and run.inline is True


def test_branching_follows_the_input():
    big = pw.start_workflow("branching", {"amount": 500})
    small = pw.start_workflow("branching", {"amount": 50})
    assert big.output == {"price": 490} and list(steps_of(big)) == ["Bulk discount"]
    assert small.output == {"price": 50} and list(steps_of(small)) == ["Full price"]


def test_retry_fails_twice_then_succeeds_with_one_invocation_id():
    run = pw.start_workflow("retrying", {"fail_times": 2, "retries": 3})
    assert run.status == "completed"
    assert run.output == {"ok": True, "attempt": 3}
    step = steps_of(run)["Flaky"]
    assert step.attempt_count == 3
    attempts = list(StepAttempt.objects.filter(step=step).order_by("attempt"))
    assert [(a.attempt, a.status) for a in attempts] == [
        (1, "failed"), (2, "failed"), (3, "succeeded")
    ]
    assert attempts[0].error["message"] == "transient failure on attempt 1"
    assert all(a.running_at and (a.failed_at or a.succeeded_at) for a in attempts)
    ids = {call["invocation_id"] for call in CALLS["flaky"]}
    assert ids == {invocation_id(run.pk, "Flaky")}
    assert [c["attempt"] for c in CALLS["flaky"]] == [1, 2, 3]


def test_invocation_id_is_uuid5_of_run_and_key_in_the_pikku_namespace():
    run_id = "3f1c7f2e-1d1a-4c55-9d5e-0f3b3c7a9b10"
    expected = uuid.uuid5(uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0001"), f"{run_id}:Charge")
    assert invocation_id(run_id, "Charge") == str(expected)
    assert invocation_id(run_id, "Charge") != invocation_id(run_id, "Charge#1")


def test_retries_zero_runs_exactly_once():
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 0})
    assert run.status == "failed"
    assert len(CALLS["flaky"]) == 1
    assert steps_of(run)["Flaky"].attempt_count == 1


def test_exhaustion_after_exactly_retries_plus_one_attempts():
    run = pw.start_workflow("retrying", {"fail_times": 10, "retries": 2})
    assert run.status == "failed"
    assert len(CALLS["flaky"]) == 3
    assert run.error == {
        "message": "step 'Flaky' failed: transient failure on attempt 3",
        "code": "STEP_FAILED",
        "step": "Flaky",
    }
    assert StepAttempt.objects.filter(step__run=run).count() == 3


def test_default_retries_come_from_settings(settings):
    settings.PIKKU_WORKFLOWS = {"DEFAULT_RETRIES": 1, "DEFAULT_RETRY_DELAY": 0}
    run = pw.start_workflow("retrying", {"fail_times": 5})
    assert run.status == "failed"
    assert len(CALLS["flaky"]) == 2


def test_on_error_runs_once_with_the_failed_input_and_the_run_still_fails():
    run = pw.start_workflow("compensated", {"order": 42, "retries": 1})
    assert run.status == "failed"
    assert run.error["code"] == "STEP_FAILED"
    assert len(CALLS["always_fails"]) == 2
    assert CALLS["refund"] == [{
        "data": {"error": {"message": "card declined for 42", "type": "ValueError"},
                 "input": {"order": 42}},
        "invocation_id": None, "attempt": None, "step": None,
    }]
    steps = steps_of(run)
    assert steps["Charge:onError"].status == "succeeded"
    assert steps["Charge:onError"].rpc_name == "refund"
    assert steps["Charge:onError"].retries == 0
    # Retrying the run re-runs the failed step, but never the compensation again.
    pw.retry_run(run.pk)
    assert WorkflowRun.objects.get(pk=run.pk).status == "failed"
    assert len(CALLS["always_fails"]) == 4
    assert len(CALLS["refund"]) == 1


def test_a_caught_step_failure_lets_the_body_go_on():
    run = pw.start_workflow("caught_failure", {})
    assert run.status == "completed"
    assert run.output == {"handled": "step 'Charge' failed: card declined for 1"}


def test_repeated_step_names_get_ordinal_keys():
    run = pw.start_workflow("repeated_names", {})
    assert run.output == [0, 1, 2]
    assert list(steps_of(run)) == ["Echo", "Echo#1", "Echo#2"]


def test_parallel_returns_results_in_order():
    run = pw.start_workflow("fan_out", {"numbers": [3, 1, 2]})
    assert run.output == [6, 2, 4]
    assert sorted(steps_of(run)) == ["Double 1", "Double 2", "Double 3"]


def test_parallel_records_every_branch_even_when_one_fails():
    run = pw.start_workflow("fan_out_with_failure", {})
    assert run.status == "failed"
    assert run.error["step"] == "Bad"
    steps = steps_of(run)
    assert steps["Ok"].status == "succeeded" and steps["Also ok"].status == "succeeded"
    assert steps["Bad"].status == "failed"


def test_cancel_from_the_body():
    run = pw.start_workflow("cancels_itself", {"cancel": True})
    assert run.status == "cancelled"
    assert run.error == {"code": "WORKFLOW_CANCELLED", "message": "customer changed their mind"}
    assert list(steps_of(run)) == ["Before"]
    with pytest.raises(pw.WorkflowRunCancelledError):
        pw.run_to_completion("cancels_itself", {"cancel": True})


def test_control_flow_signals_cannot_be_swallowed_by_except_exception():
    run = pw.start_workflow("swallow_signals", {})
    assert run.status == "cancelled"


def test_cancel_run_from_outside_stops_a_suspended_run():
    run = pw.start_workflow("calls_missing_function", {})
    assert run.status == "suspended"
    cancelled = pw.cancel_run(run.pk, reason="no longer needed")
    assert cancelled.status == "cancelled"
    assert cancelled.error == {"code": "WORKFLOW_CANCELLED", "message": "no longer needed"}
    assert cancelled.finished_at is not None
    with pytest.raises(pw.WorkflowRunStateError):
        pw.cancel_run(run.pk)
    with pytest.raises(pw.WorkflowRunStateError):
        pw.resume_run(run.pk)


def test_missing_function_suspends_then_resume_runs_it_once_deployed():
    run = pw.start_workflow("calls_missing_function", {})
    assert run.status == "suspended"
    assert run.error["code"] == "RPC_NOT_FOUND"
    assert "deployed_later" in run.error["message"]
    steps = steps_of(run)
    assert steps["First"].status == "succeeded"
    assert steps["Later"].status == "pending" and steps["Later"].rpc_name == "deployed_later"
    assert steps["Later"].data == {"x": 1}

    # Resuming before the deploy suspends again, without running anything twice.
    assert pw.resume_run(run.pk).status == "suspended"
    assert len(CALLS["echo"]) == 1

    from pikku_workflows.registry import registry

    with registry.isolated():
        @pw.function
        def deployed_later(data):
            return {"got": data}

        resumed = pw.resume_run(run.pk)
    assert resumed.status == "completed"
    assert resumed.output == {"first": "first", "later": {"got": {"x": 1}}}
    assert resumed.error is None
    assert len(CALLS["echo"]) == 1


def test_non_serializable_result_fails_the_step_at_once_naming_step_and_type():
    run = pw.start_workflow("bad_result", {})
    assert run.status == "failed"
    assert len(CALLS["returns_a_set"]) == 1  # no retries for a result that cannot be stored
    assert "step 'Set'" in run.error["message"] and "set" in run.error["message"]
    step = steps_of(run)["Set"]
    assert step.status == "failed" and step.result is None


def test_non_serializable_step_data_is_rejected_before_running():
    run = pw.start_workflow("bad_data", {})
    assert run.status == "failed"
    assert CALLS["echo"] == []
    assert "step 'Send object'" in run.error["message"] and "object" in run.error["message"]


def test_non_serializable_output_fails_the_run():
    run = pw.start_workflow("bad_output", {})
    assert run.status == "failed"
    assert run.error["code"] == "INVALID_OUTPUT"
    assert "object" in run.error["message"]


def test_non_serializable_input_creates_no_run():
    with pytest.raises(pw.WorkflowInputError, match=r"input of workflow 'sequential'.*set"):
        pw.start_workflow("sequential", {"x": {1, 2}})
    assert WorkflowRun.objects.count() == 0


def test_oversized_input_is_refused(settings):
    settings.PIKKU_WORKFLOWS = {"MAX_INPUT_BYTES": 100}
    with pytest.raises(pw.WorkflowInputError, match="MAX_INPUT_BYTES"):
        pw.start_workflow("sequential", {"x": "y" * 200})
    assert WorkflowRun.objects.count() == 0


@pytest.mark.parametrize("value", [0, False, "", [], {}, None])
def test_falsy_outputs_are_stored_and_returned_as_given(value):
    run = pw.start_workflow("returns_given", {"value": value})
    assert run.status == "completed"
    stored = WorkflowRun.objects.get(pk=run.pk).output
    assert stored == value and type(stored) is type(value)
    assert pw.run_to_completion("returns_given", {"value": value}) == value
    assert pw.get_run_status(run.pk)["output"] == value


def test_unknown_names_raise_clear_errors():
    with pytest.raises(pw.WorkflowNotFoundError, match="no-such-workflow"):
        pw.start_workflow("no-such-workflow")
    with pytest.raises(pw.WorkflowRunNotFoundError):
        pw.get_run_status(uuid.uuid4())
    with pytest.raises(pw.WorkflowRunNotFoundError):
        pw.get_run_status("not-a-uuid")
    with pytest.raises(pw.WorkflowRunNotFoundError):
        pw.resume_run(uuid.uuid4())
    with pytest.raises(pw.WorkflowRunNotFoundError):
        pw.cancel_run(uuid.uuid4())


def test_a_body_exception_fails_the_run_with_its_class_name():
    run = pw.start_workflow("raises_itself", {})
    assert run.status == "failed"
    assert {k: run.error[k] for k in ("message", "code")} == {
        "message": "'missing-thing'", "code": "KeyError"}
    # Staff-only details (the API strips them): where the user's code failed.
    assert run.error["type"] == "builtins.KeyError" and run.error["after_step"] == "Ok"
    assert run.error["traceback"].endswith("KeyError: 'missing-thing'\n")
    assert "workflows_engine.py" in run.error["line"]
    assert pw.get_run_status(run.pk)["error"] == {"message": "'missing-thing'",
                                                  "code": "KeyError"}
    with pytest.raises(pw.WorkflowRunFailedError, match="missing-thing"):
        pw.run_to_completion("raises_itself", {})


def test_inline_closures_are_memoized():
    run = pw.start_workflow("closures", {"order": 7})
    assert run.output == {"note": "Order 7 paid"}
    step = steps_of(run)["Compose note"]
    assert step.rpc_name is None and step.result == "Order 7 paid"


def test_replay_does_not_rerun_succeeded_steps():
    from pikku_workflows.runtime.orchestrator import run_pass

    run = pw.start_workflow("calls_missing_function", {})
    assert len(CALLS["echo"]) == 1
    # Force several more passes over the same run: "First" stays memoized.
    for _ in range(3):
        WorkflowRun.objects.filter(pk=run.pk).update(status="running", error=None)
        run_pass(run.pk)
    assert len(CALLS["echo"]) == 1
    assert StepAttempt.objects.filter(step__run=run, step__step_name="First").count() == 1


def test_terminal_runs_are_never_replayed():
    from pikku_workflows.runtime.orchestrator import run_pass

    run = pw.start_workflow("sequential", {"x": 1})
    assert run_pass(run.pk).kind == "completed"
    assert len(CALLS["add"]) == 1


def test_run_to_completion_returns_the_output():
    assert pw.run_to_completion("sequential", {"x": 2}) == {"total": 3, "doubled": 6}
    with pytest.raises(pw.WorkflowRunSuspendedError):
        pw.run_to_completion("calls_missing_function", {})


def test_get_run_status_has_the_run_detail_shape():
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})
    status = pw.get_run_status(run.pk)
    assert set(status) == {
        "id", "workflow", "status", "input", "output", "error", "owner", "parent_run",
        "graph_hash", "inline", "created_at", "updated_at", "finished_at", "steps",
    }
    assert status["id"] == str(run.pk) and status["status"] == "completed"
    assert status["graph_hash"] == run.graph_hash and len(run.graph_hash) == 12
    [step] = status["steps"]
    assert step["name"] == "Flaky" and step["attempts"] == 2 and step["rpc_name"] == "flaky"
    assert (step["label"], step["kind"]) == ("Flaky", "step")
    assert isinstance(step["duration_ms"], int)


def test_get_run_status_names_gates_and_compensations_presentably():
    gated = pw.start_workflow("two_gates", {})
    status = pw.get_run_status(gated.pk)
    assert status["error"]["step"] == "suspend:Awaiting warehouse"
    assert [(s["name"], s["label"], s["kind"]) for s in status["steps"]] == [
        ("suspend:Awaiting warehouse", "Awaiting warehouse", "suspend")]
    failed = pw.start_workflow("compensated", {"order": 1, "retries": 0})
    assert [(s["name"], s["label"], s["kind"])
            for s in pw.get_run_status(failed.pk)["steps"]] == [
        ("Charge", "Charge", "step"), ("Charge:onError", "Charge", "compensation")]
    assert pw.get_run_status(failed.pk)["error"]["step"] == "Charge"


def test_atomic_step_rolls_back_its_own_writes_with_a_failed_attempt():
    run = pw.start_workflow("atomic_step", {"crash_times": 1})
    assert run.status == "completed"
    # The first attempt wrote a row then raised: the row went with it.
    assert list(Ledger.objects.values_list("note", flat=True)) == ["attempt 2"]


def test_retry_run_after_the_bug_is_fixed():
    run = pw.start_workflow("retrying", {"fail_times": 3, "retries": 1})
    assert run.status == "failed" and len(CALLS["flaky"]) == 2
    retried = pw.retry_run(run.pk)
    assert retried.status == "completed"
    assert retried.output == {"ok": True, "attempt": 4}
    with pytest.raises(pw.WorkflowRunStateError):
        pw.retry_run(run.pk)


def test_run_state_keys_merge():
    run = pw.start_workflow("with_state", {})
    assert run.output == {"a": 1, "b": {"nested": True}}
    assert WorkflowRun.objects.get(pk=run.pk).state == {"a": 1, "b": {"nested": True}}


@pytest.mark.parametrize("name", ["with_state", "sequential", "raises_itself"])
def test_an_inline_start_returns_the_run_as_stored(name):
    # The run's end updates the row start_workflow returns instead of reading it again.
    run = pw.start_workflow(name, {"x": 1})
    stored = WorkflowRun.objects.get(pk=run.pk)
    fields = [f.attname for f in WorkflowRun._meta.concrete_fields]
    assert [getattr(run, f) for f in fields] == [getattr(stored, f) for f in fields]
    assert run.status != RunStatus.RUNNING


def test_owner_is_recorded(django_user_model):
    user = django_user_model.objects.create_user("ada")
    run = pw.start_workflow("sequential", {"x": 1}, owner=user)
    assert run.owner_id == user.pk
    assert pw.get_run_status(run.pk)["owner"] == user.pk
