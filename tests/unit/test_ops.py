"""Operations: run_inline() with queued steps, pikku_worker's logging, the settings
check, and the audit of refused approval answers."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.testing import run_inline
from tests.testapp.models import Ledger

#: The rq executor on a Redis nobody answers on: anything sent there fails.
UNREACHABLE_RQ = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable", "DEFAULT_RETRY_DELAY": 0}


# --- run_inline() runs queued steps in the test's process --------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workflow, data, output", [
    ("one_queued", "x", "x"),
    ("ten_steps", None, 45),
    ("parent", {"child": "one_queued", "child_input": "y"}, {"parent_saw": "y"}),
])
def test_run_inline_runs_queued_steps_without_redis(workflow, data, output):
    with override_settings(PIKKU_WORKFLOWS=UNREACHABLE_RQ), run_inline():
        run = pw.start_workflow(workflow, data)
        status = pw.get_run_status(run.id)
    assert status["status"] == "completed", status
    assert status["output"] == output
    assert Ledger.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_run_inline_runs_queued_steps_when_the_executor_is_inline():
    with run_inline():
        assert pw.run_to_completion("one_queued", "z") == "z"


@pytest.mark.django_db(transaction=True)
def test_outside_run_inline_an_inline_run_still_refuses_queued_steps():
    run = pw.start_workflow("one_queued", "x")
    assert pw.get_run_status(run.id)["status"] == "failed"


@pw.workflow
def ops_queued_fan_out(wf, data):
    return wf.parallel([(f"Q{i}", "q_record", i) for i in range(3)])


@pytest.mark.django_db(transaction=True)
def test_run_inline_runs_a_fan_out_of_queued_steps_without_redis():
    with override_settings(PIKKU_WORKFLOWS=UNREACHABLE_RQ), run_inline():
        assert pw.run_to_completion("ops_queued_fan_out") == [0, 1, 2]
    assert Ledger.objects.count() == 3


# --- every refused approval answer is audited ------------------------------------------

AUDIT = {"AUDIT": "tests.testapp.shared.collect_audit", "DEFAULT_RETRY_DELAY": 0}


def _audited():
    from tests.testapp.shared import AUDIT_LOG

    return [(a["outcome"], a["reason"], a["user_id"], bool(a["refusal"])) for a in AUDIT_LOG]


@pytest.mark.django_db
def test_an_answer_to_an_expired_gate_is_audited(users):
    from pikku_workflows.testing import fake_clock

    with override_settings(PIKKU_WORKFLOWS=AUDIT), fake_clock() as clock:
        run = pw.start_workflow("needs_approval", {"expiry": "1h"})
        clock.sleep(7200)   # the deadline passes; nobody has woken the run yet
        with pytest.raises(pw.WorkflowApprovalResolvedError, match="expired"):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert _audited() == [("expired", "Manager sign-off", users["other"].pk, True)]


@pytest.mark.django_db
def test_an_answer_to_a_finished_run_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("needs_approval", {})
        pw.cancel_run(run.pk)
        with pytest.raises(pw.WorkflowRunStateError):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert _audited() == [("run_finished", "Manager sign-off", users["other"].pk, True)]


@pytest.mark.django_db
def test_an_answer_to_an_unknown_gate_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("needs_approval", {})
        with pytest.raises(pw.WorkflowError, match="no approval gate"):
            pw.approve_step(run.pk, "Nobody's gate", {"ok": 1}, user=users["other"])
    assert _audited() == [("unknown_gate", "Nobody's gate", users["other"].pk, True)]


@pytest.mark.django_db
def test_an_answer_to_a_settled_gate_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("prefixed_gates", {})
        pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["owner"])
        assert pw.get_run_status(run.pk)["status"] == "suspended"   # at the second gate
        with pytest.raises(pw.WorkflowApprovalResolvedError, match="already"):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 2}, user=users["other"])
    assert _audited() == [("success", "Manager sign-off", users["owner"].pk, False),
                          ("already_settled", "Manager sign-off", users["other"].pk, True)]


@pytest.mark.django_db
def test_a_forbidden_answer_is_audited(users):
    with override_settings(PIKKU_WORKFLOWS=AUDIT):
        run = pw.start_workflow("needs_approval", {"approvers": "owner"}, owner=users["owner"])
        with pytest.raises(pw.WorkflowApprovalForbiddenError):
            pw.approve_step(run.pk, "Manager sign-off", {"ok": 1}, user=users["other"])
    assert _audited() == [("denied", "Manager sign-off", users["other"].pk, True)]
