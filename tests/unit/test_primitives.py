"""Durable primitives: suspend/resume, approvals, sleeps, child runs, versions, idempotency."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import Permission
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowVersion
from pikku_workflows.registry import registry
from pikku_workflows.runtime.orchestrator import run_pass
from pikku_workflows.testing import fake_clock
from tests.testapp.shared import AUDIT_LOG, CALLS

pytestmark = pytest.mark.django_db

AUDIT = {"AUDIT": "tests.testapp.shared.collect_audit", "DEFAULT_RETRY_DELAY": 0}


def step(run, name):
    return WorkflowStep.objects.get(run_id=run.pk, step_name=name)


def reload(run):
    return WorkflowRun.objects.get(pk=run.pk)


# --- suspend / resume -------------------------------------------------------------------


def test_suspend_then_resume_returns_the_data_and_gates_are_separate():
    run = pw.start_workflow("two_gates", {})
    assert run.status == "suspended"
    assert run.error == {"code": "WORKFLOW_SUSPENDED", "message": "Awaiting warehouse",
                         "step": "__workflow_suspend:Awaiting warehouse"}
    assert step(run, "__workflow_suspend:Awaiting warehouse").status == "suspended"

    run = pw.resume_run(run.pk, {"dock": 4})
    assert run.status == "suspended" and run.error["message"] == "Awaiting courier"
    assert CALLS["echo"] == [{"data": "between", "invocation_id": None, "attempt": None,
                              "step": None}]
    run = pw.resume_run(run.pk, "van 7")
    assert run.status == "completed"
    assert run.output == {"warehouse": {"dock": 4}, "courier": "van 7"}
    assert len(CALLS["echo"]) == 1


def test_a_duplicate_pass_does_not_open_a_suspend_gate():
    run = pw.start_workflow("two_gates", {})
    assert run_pass(run.pk).kind == "suspended"  # a stray orchestrator job: nothing happens
    # Even a pass of a run forced back to running finds the gate still closed.
    WorkflowRun.objects.filter(pk=run.pk).update(status="running")
    assert run_pass(run.pk).kind == "suspended"
    assert step(run, "__workflow_suspend:Awaiting warehouse").status == "suspended"
    assert "Between" not in {s.step_name for s in WorkflowStep.objects.filter(run_id=run.pk)}


def test_resume_is_refused_unless_suspended():
    run = pw.start_workflow("sequential", {"x": 1})
    with pytest.raises(pw.WorkflowRunStateError, match="not suspended"):
        pw.resume_run(run.pk)
    suspended = pw.start_workflow("two_gates", {})
    with pytest.raises(pw.WorkflowInputError, match="resume data"):
        pw.resume_run(suspended.pk, {1, 2})
    assert reload(suspended).status == "suspended"


def test_resume_sets_running_before_the_pass():
    seen = []
    with registry.isolated():
        @pw.workflow
        def looks_at_itself(wf, data):
            wf.suspend("wait")
            seen.append(wf.get_run().status)
            return "ok"

        run = pw.start_workflow("looks_at_itself")
        pw.resume_run(run.pk)
    assert seen == ["running"]


# --- approvals -----------------------------------------------------------------------------


@pytest.fixture
def users(django_user_model):
    return {name: django_user_model.objects.create_user(name) for name in ("owner", "other")}


def test_approval_decided_by_anyone(settings, users):
    settings.PIKKU_WORKFLOWS = AUDIT
    run = pw.start_workflow("needs_approval", {}, owner=users["owner"])
    assert run.status == "suspended" and run.error["message"] == "Manager sign-off"
    gate = step(run, "__workflow_approval:Manager sign-off")
    assert gate.status == "suspended" and gate.data["approvers"] == "any"
    run = pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert run.status == "completed"
    assert run.output["status"] == "decided" and run.output["data"] == {"ok": 1}
    assert run.output["decided_by"] == users["other"].pk and run.output["decided_at"]
    # One entry per decision: the gate's judgement (recording it is not an outcome).
    assert [(a["outcome"], a["user_id"], a["reason"]) for a in AUDIT_LOG] == [
        ("success", users["other"].pk, "Manager sign-off"),
    ]
    with pytest.raises(pw.WorkflowError):
        pw.approve_step(run.pk, "Manager sign-off", {"ok": 2})


def test_settled_gate_refuses_a_second_decision(users):
    run = pw.start_workflow("needs_approval", {"expiry": "1h"})
    with fake_clock() as clock:
        clock.advance("2h")
        assert reload(run).status == "completed"
        assert reload(run).output == {"status": "expired"}
    # A finished run refuses any answer; so does a settled gate of a live run.
    with pytest.raises(pw.WorkflowError):
        pw.approve_step(run.pk, "Manager sign-off", {"ok": True})


def test_settled_gate_of_a_live_run_is_409():
    with registry.isolated():
        @pw.workflow
        def gate_then_hold(wf, data):
            wf.approval("Check")
            wf.suspend("Hold")

        run = pw.start_workflow("gate_then_hold")
        pw.approve_step(run.pk, "Check", "yes")
        assert reload(run).error["message"] == "Hold"
        with pytest.raises(pw.WorkflowApprovalResolvedError, match="decided"):
            pw.approve_step(run.pk, "Check", "again")


def test_owner_policy(settings, users):
    settings.PIKKU_WORKFLOWS = AUDIT
    run = pw.start_workflow("needs_approval", {"approvers": "owner"}, owner=users["owner"])
    with pytest.raises(pw.WorkflowApprovalForbiddenError, match="owner"):
        pw.approve_step(run.pk, "Manager sign-off", True, user=users["other"])
    assert AUDIT_LOG[-1]["outcome"] == "denied" and AUDIT_LOG[-1]["user_id"] == users["other"].pk
    assert reload(run).status == "suspended"
    assert pw.approve_step(run.pk, "Manager sign-off", True, user=users["owner"]).status == \
        "completed"


def test_not_initiator_policy_is_four_eyes(settings, users):
    settings.PIKKU_WORKFLOWS = AUDIT
    run = pw.start_workflow("needs_approval", {"approvers": "not-initiator"},
                            owner=users["owner"])
    with pytest.raises(pw.WorkflowApprovalForbiddenError, match="initiator"):
        pw.approve_step(run.pk, "Manager sign-off", True, user=users["owner"])
    with pytest.raises(pw.WorkflowApprovalForbiddenError, match="signed-in"):
        pw.approve_step(run.pk, "Manager sign-off", True, user=None)
    assert pw.approve_step(run.pk, "Manager sign-off", True, user=users["other"]).status == \
        "completed"
    assert [a["outcome"] for a in AUDIT_LOG] == ["denied", "denied", "success"]


def test_approver_permission(users):
    run = pw.start_workflow("needs_approval", {"permission": "pikku_workflows.view_workflowrun"})
    with pytest.raises(pw.WorkflowApprovalForbiddenError, match="permission"):
        pw.approve_step(run.pk, "Manager sign-off", True, user=users["other"])
    users["other"].user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    approver = type(users["other"]).objects.get(pk=users["other"].pk)  # fresh perm cache
    assert pw.approve_step(run.pk, "Manager sign-off", True, user=approver).status == "completed"


def test_early_decision_is_judged_when_the_run_reaches_the_gate(settings, users):
    settings.PIKKU_WORKFLOWS = AUDIT
    run = pw.start_workflow("two_gates", {})
    with registry.isolated():
        @pw.workflow
        def late_gate(wf, data):
            wf.suspend("first")
            return wf.approval("Late", approvers="not-initiator")

        run = pw.start_workflow("late_gate", owner=users["owner"])
        # Recorded before the gate exists; the policy refuses it on replay.
        pw.approve_step(run.pk, "Late", "yes", user=users["owner"])
        run = pw.resume_run(run.pk)
        assert run.status == "suspended" and run.error["message"] == "Late"
        record = run.state["__approval_" + b"__workflow_approval:Late".hex()]
        assert record["decision"] is None and "initiator" in record["errors"][0]["message"]
        assert AUDIT_LOG[-1]["outcome"] == "denied"
        run = pw.approve_step(run.pk, "Late", "yes", user=users["other"])
        assert run.status == "completed" and run.output["data"] == "yes"


def test_invalid_then_valid_decision(settings):
    settings.PIKKU_WORKFLOWS = AUDIT
    run = pw.start_workflow("needs_approval", {"validate": True})
    run = pw.approve_step(run.pk, "Manager sign-off", {"approved": "perhaps"})
    assert run.status == "suspended"  # never failed by a bad decision
    record = run.state["__approval_" + b"__workflow_approval:Manager sign-off".hex()]
    assert "approved" in record["errors"] and record["rejected"] == {"approved": "perhaps"}
    assert AUDIT_LOG[-1]["outcome"] == "invalid"
    assert AUDIT_LOG[-1]["refusal"] == "approved: Must be a valid boolean."
    run = pw.approve_step(run.pk, "Manager sign-off", {"approved": True})
    assert run.status == "completed"
    assert run.output["data"] == {"approved": True, "note": ""}


def test_expiry_from_the_recorded_deadline():
    with fake_clock() as clock:
        run = pw.start_workflow("needs_approval", {"expiry": "3d"})
        gate = step(run, "__workflow_approval:Manager sign-off")
        assert gate.wake_at == clock.now().replace(microsecond=gate.wake_at.microsecond) \
            or gate.wake_at > clock.now()
        clock.advance("2d")
        assert reload(run).status == "suspended"
        clock.advance("1d")
        run = reload(run)
        assert run.status == "completed" and run.output == {"status": "expired"}
        assert CALLS["echo"][-1]["data"] == "expired"


def test_decision_recorded_before_the_deadline_wins():
    with fake_clock() as clock:
        run = pw.start_workflow("needs_approval", {"expiry": "1h"})
        # Record the decision without a pass, then let the deadline pass before judging.
        WorkflowRun.objects.filter(pk=run.pk).update(status="running")
        pw.approve_step(run.pk, "Manager sign-off", "yes")
        clock.advance("2h")
        run_pass(run.pk)
        assert reload(run).output["status"] == "decided"


def test_decision_after_the_deadline_is_refused():
    with fake_clock() as clock:
        run = pw.start_workflow("needs_approval", {"expiry": "1h"})
        clock.sleep(7200)  # time passes, but nothing has woken the run yet
        with pytest.raises(pw.WorkflowApprovalResolvedError, match="expired"):
            pw.approve_step(run.pk, "Manager sign-off", "too late")
        assert reload(run).output == {"status": "expired"}


def test_bad_approval_arguments():
    with registry.isolated():
        @pw.workflow
        def bad_gate(wf, data):
            wf.approval("x", approvers="everyone")

        run = pw.start_workflow("bad_gate")
    assert run.status == "failed" and "approvers must be one of" in run.error["message"]


# --- sleep and the fake clock ---------------------------------------------------------------


def test_fake_clock_runs_a_week_long_sleep_instantly():
    with fake_clock() as clock:
        begin = clock.now()
        run = pw.start_workflow("sleeps_a_week", {})
        assert (clock.now() - begin).days == 7
    assert run.status == "completed" and run.output == "after"
    sleep = step(run, "A week")
    assert sleep.status == "succeeded" and sleep.data == {"duration": 604800.0}
    assert sleep.wake_at is not None


def test_a_bad_duration_is_a_clear_error_at_the_call():
    with registry.isolated():
        @pw.workflow
        def bad_sleep(wf, data):
            wf.sleep("nap", "a while")

        run = pw.start_workflow("bad_sleep")
    assert run.status == "failed"
    assert run.error["code"] == "DEFINITION_ERROR" and "a while" in run.error["message"]


def test_inline_sleep_really_waits_without_the_fake_clock():
    with registry.isolated():
        @pw.workflow
        def short_nap(wf, data):
            wf.sleep("nap", "200ms")
            return "rested"

        started = time.monotonic()
        assert pw.run_to_completion("short_nap") == "rested"
    assert time.monotonic() - started >= 0.2


# --- child runs ---------------------------------------------------------------------------


def test_child_run_success(users):
    run = pw.start_workflow("parent", {"child": "child_ok"}, owner=users["owner"])
    assert run.status == "completed"
    assert run.output == {"parent_saw": {"child_got": 42}}
    child = WorkflowRun.objects.get(parent_run=run)
    assert child.workflow == "child_ok" and child.owner_id == users["owner"].pk
    assert step(run, "Run child").child_run_id == child.pk
    assert step(run, "Run child").rpc_name == "child_ok"


def test_child_run_failure_fails_the_parent_step():
    run = pw.start_workflow("parent", {"child": "child_fails", "child_input": {}})
    assert run.status == "failed"
    assert run.error["code"] == "STEP_FAILED" and run.error["step"] == "Run child"
    assert "card declined" in run.error["message"]
    child = WorkflowRun.objects.get(parent_run=run)
    assert child.status == "failed"


def test_child_suspension_keeps_the_parent_waiting():
    run = pw.start_workflow("parent", {"child": "child_suspends", "child_input": {}})
    child = WorkflowRun.objects.get(parent_run=run)
    assert child.status == "suspended"
    assert reload(run).status == "running"  # waiting, never given None
    assert step(run, "Run child").status == "running"
    pw.resume_run(child.pk, {"go": True})
    run = reload(run)
    assert run.status == "completed"
    assert run.output == {"parent_saw": {"resumed_with": {"go": True}}}


def test_cancelling_the_parent_cascades_to_the_child():
    run = pw.start_workflow("parent", {"child": "child_suspends", "child_input": {}})
    pw.cancel_run(run.pk, "stop everything")
    child = WorkflowRun.objects.get(parent_run=run)
    assert reload(run).status == "cancelled" and child.status == "cancelled"
    assert "was cancelled" in child.error["message"]


def test_cancelling_a_parent_closes_the_steps_waiting_in_it_and_in_its_child():
    """The parent's child-run step used to stay running after the cancel."""
    run = pw.start_workflow("parent", {"child": "child_suspends", "child_input": {}})
    pw.cancel_run(run.pk, "customer left")
    child = WorkflowRun.objects.get(parent_run=run)
    for owner in (run, child):
        step = WorkflowStep.objects.get(run=owner)
        assert step.status == "failed" and step.error["code"] == "WORKFLOW_CANCELLED"
        assert all(a.status == "failed" and a.failed_at for a in step.attempts.all())
    assert reload(run).status == "cancelled" and child.status == "cancelled"


def test_retry_run_retries_a_failed_child():
    run = pw.start_workflow("parent", {"child": "child_fails", "child_input": {}})
    child = WorkflowRun.objects.get(parent_run=run)
    WorkflowRun.objects.filter(pk=child.pk).update(input={"fixed": True})  # the "fix"
    run = pw.retry_run(run.pk)
    assert run.status == "completed" and run.output == {"parent_saw": "fixed"}
    assert WorkflowRun.objects.filter(parent_run=run).count() == 1


def test_retrying_a_parent_retries_its_one_child_from_the_failed_step():
    """Two retries used to give three child runs, each running the child's done steps."""
    with registry.isolated():
        @pw.workflow(name="half_done_child")
        def half_done_child(wf, data):
            wf.do("Done part", "add", {"a": 1, "b": 2})
            wf.do("Broken", "always_fails", {"order": "child"}, retries=0)

        run = pw.start_workflow("parent", {"child": "half_done_child", "child_input": {}})
        for _ in range(2):
            assert reload(run).status == "failed"
            pw.retry_run(run.pk)
    run = reload(run)
    child = WorkflowRun.objects.get(parent_run=run)  # one child run, retried in place
    assert run.status == "failed" and child.status == "failed"
    assert len(CALLS["add"]) == 1 and len(CALLS["always_fails"]) == 3
    step = WorkflowStep.objects.get(run=run, step_name="Run child")
    assert step.child_run_id == child.pk
    assert list(step.attempts.values_list("attempt", "status")) == [
        (1, "failed"), (2, "failed"), (3, "failed")]


def test_every_retry_run_gives_the_step_its_configured_budget_again():
    """The budget grew with each retry_run (2, then 2, then 4 attempts for retries=1)."""
    with registry.isolated():
        @pw.workflow(name="fails_twice_per_retry")
        def fails_twice_per_retry(wf, data):
            wf.do("Charge", "always_fails", {"order": 1}, retries=1, retry_delay=0)

        run = pw.start_workflow("fails_twice_per_retry", {})
        seen = [len(CALLS["always_fails"])]
        for _ in range(2):
            pw.retry_run(run.pk)
            seen.append(len(CALLS["always_fails"]))
    assert seen == [2, 4, 6] and reload(run).status == "failed"


# --- idempotency ---------------------------------------------------------------------------


def test_idempotency_key_returns_the_existing_run():
    first = pw.start_workflow("sequential", {"x": 1}, idempotency_key="order-7")
    again = pw.start_workflow("sequential", {"x": 1}, idempotency_key="order-7")
    assert again.pk == first.pk and len(CALLS["add"]) == 1
    other = pw.start_workflow("branching", {"amount": 1}, idempotency_key="order-7")
    assert other.pk != first.pk


@pytest.mark.parametrize(("key", "message"), [
    ("", "must be a non-empty string"),
    ("  ", "must be a non-empty string"),
    (7, "must be a non-empty string, not 7"),
    ("k" * 201, "is 201 characters long; the limit is 200"),
])
def test_bad_idempotency_keys_are_refused_before_anything_is_written(key, message):
    with pytest.raises(ValueError, match=message) as raised:
        pw.start_workflow("sequential", {"x": 1}, idempotency_key=key)
    assert isinstance(raised.value, pw.WorkflowInputError)
    assert not WorkflowRun.objects.exists() and not CALLS


@pytest.mark.django_db(transaction=True)
def test_idempotency_under_two_concurrent_starts():
    with registry.isolated():
        barrier = threading.Barrier(2)

        @pw.function
        def slow(data):
            # Holds the first start's transaction open, so that the second start races it.
            time.sleep(0.2)
            return data

        @pw.workflow
        def slow_start(wf, data):
            return wf.do("Slow", "slow", 1)

        ids, errors = [], []

        def start():
            try:
                barrier.wait()
                ids.append(pw.start_workflow("slow_start", {}, idempotency_key="same").pk)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=start) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert len(ids) == 2 and ids[0] == ids[1]
    assert WorkflowRun.objects.filter(workflow="slow_start").count() == 1


# --- versions ------------------------------------------------------------------------------


def test_pikku_versions_registers_each_workflow_once(capsys):
    from django.core.management import call_command

    call_command("pikku_versions")
    assert "sequential@" in capsys.readouterr().out
    count = WorkflowVersion.objects.count()
    call_command("pikku_versions")
    assert WorkflowVersion.objects.count() == count
    version = WorkflowVersion.objects.get(workflow="sequential")
    assert version.graph_hash == registry.workflow("sequential").graph_hash
    assert version.status == "active" and version.source == "dsl"


def test_declined_versions_refuse_new_runs():
    pw.start_workflow("sequential", {"x": 1})
    WorkflowVersion.objects.filter(workflow="sequential").update(status="declined")
    with pytest.raises(pw.WorkflowVersionDeclinedError, match="declined"):
        pw.start_workflow("sequential", {"x": 1})
    assert WorkflowRun.objects.filter(workflow="sequential").count() == 1


def test_changed_code_that_diverges_suspends_with_version_conflict():
    run = pw.start_workflow("versioned", {})
    assert run.status == "suspended"
    with registry.isolated():
        registry.unregister("versioned")  # a deploy replaces the code

        @pw.workflow(name="versioned")
        def versioned_v2(wf, data):
            wf.do("Zero", "echo", 0)  # new, before the recorded "One"
            wf.do("One", "echo", 1)
            wf.suspend("Hold")
            return wf.do("Two", "echo", 2)

        run = pw.resume_run(run.pk)
    assert run.status == "suspended"
    assert run.error["code"] == "VERSION_CONFLICT" and run.error["step"] == "Zero"
    assert "Zero" in run.error["message"]
    assert not WorkflowStep.objects.filter(run_id=run.pk, step_name="Zero").exists()


STEP_PLAN = {"first": "One"}


def _first_step_name():
    return STEP_PLAN["first"]  # a helper the workflow's code hash cannot see


def test_a_changed_helper_with_an_unchanged_hash_is_caught_and_the_resume_data_kept():
    """The check ran only when the hash changed: the run resumed into a step it never
    recorded. The resume that hits the conflict keeps its data for the fixed code."""
    with registry.isolated():
        @pw.workflow(name="helper_driven")
        def helper_driven(wf, data):
            wf.do(_first_step_name(), "echo", 1)
            dock = wf.suspend("Hold")
            return {"dock": dock, "two": wf.do("Two", "echo", 2)}

        run = pw.start_workflow("helper_driven", {})
        hash_before = reload(run).graph_hash
        STEP_PLAN["first"] = "Renamed"  # a deploy changes the helper only
        try:
            run = pw.resume_run(run.pk, data={"dock": 4})
            assert registry.workflow("helper_driven").graph_hash == hash_before
            assert run.status == "suspended" and run.error["code"] == "VERSION_CONFLICT"
            assert run.error["step"] == "Renamed"
            assert "never recorded, where the run recorded 'One' next" in run.error["message"]
            assert not WorkflowStep.objects.filter(run=run, step_name="Renamed").exists()
        finally:
            STEP_PLAN["first"] = "One"  # the fix is deployed
        run = pw.resume_run(run.pk)
    assert run.status == "completed" and run.output == {"dock": {"dock": 4}, "two": 2}


def test_recorded_steps_reached_out_of_order_are_a_version_conflict():
    with registry.isolated():
        @pw.workflow(name="ordered")
        def ordered(wf, data):
            wf.do("A", "echo", 1)
            wf.do("B", "echo", 2)
            wf.suspend("Hold")
            return "done"

        run = pw.start_workflow("ordered", {})
        registry.unregister("ordered")

        @pw.workflow(name="ordered")
        def swapped(wf, data):
            wf.do("B", "echo", 2)
            wf.do("A", "echo", 1)
            wf.suspend("Hold")
            return "done"

        run = pw.resume_run(run.pk)
    assert run.status == "suspended" and run.error["code"] == "VERSION_CONFLICT"
    assert run.error["step"] == "B" and "'B', out of order, where the run recorded 'A'" in \
        run.error["message"]


def test_changed_code_that_only_adds_later_steps_carries_on():
    run = pw.start_workflow("versioned", {})
    with registry.isolated():
        registry.unregister("versioned")

        @pw.workflow(name="versioned")
        def versioned_v3(wf, data):
            wf.do("One", "echo", 1)
            wf.suspend("Hold")
            wf.do("Two", "echo", 2)
            return wf.do("Three", "echo", 3)

        run = pw.resume_run(run.pk)
    assert run.status == "completed" and run.output == 3


@pytest.mark.parametrize(("name", "message"), [
    ("A#1", "is reserved"),
    ("Charge:onError", "is reserved"),
    ("__workflow_suspend:x", "is reserved"),
    ("", "non-empty string"),
    ("   ", "non-empty string"),
    (42, "non-empty string"),
    ("line\nbreak", "contains control characters"),
    ("x" * 301, "the limit is 300"),
])
def test_step_names_that_would_alias_or_not_fit_are_refused(name, message):
    """do("A"), do("A"), do("A#1") used to return the second A's result to the third."""
    with registry.isolated():
        @pw.workflow(name="named_badly")
        def named_badly(wf, data):
            wf.do("A", lambda: 1)
            return wf.do(name, lambda: 2)

        run = pw.start_workflow("named_badly", {})
    run.refresh_from_db()
    assert run.status == "failed" and run.error["code"] == "DEFINITION_ERROR"
    assert message in run.error["message"]
    assert list(run.steps.values_list("step_name", flat=True)) == ["A"]


def test_a_repeated_name_whose_key_outgrows_the_column_is_refused():
    with registry.isolated():
        @pw.workflow(name="long_repeats")
        def long_repeats(wf, data):
            return [wf.do("y" * 299, lambda: 1) for _ in range(2)]

        run = pw.start_workflow("long_repeats", {})
    run.refresh_from_db()
    assert run.status == "failed" and "has 301 characters; the limit is 300" in run.error["message"]


def test_how_a_run_was_started_is_recorded_without_a_public_parameter():
    """``wire`` was a parameter of start_workflow, outside the public contract."""
    import inspect

    from pikku_workflows import operations

    assert "wire" not in inspect.signature(pw.start_workflow).parameters
    assert pw.start_workflow("sequential", {"x": 1}).wire == {"type": "python"}
    with operations.started_from({"type": "cli"}):
        assert pw.start_workflow("sequential", {"x": 1}).wire == {"type": "cli"}
    assert pw.start_workflow("sequential", {"x": 1}).wire == {"type": "python"}
