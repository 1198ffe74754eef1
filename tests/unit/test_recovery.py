"""Recovery and robustness: nothing a lost job or a race can strand, double or cut short."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine import store
from pikku_workflows.engine.lease_renewal import keep_alive
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.runtime import recovery, step_worker
from pikku_workflows.runtime.orchestrator import run_pass
from pikku_workflows.runtime.step_worker import run_queued_step
from pikku_workflows.status import StepStatus
from pikku_workflows.testing import fake_clock
from tests.attempts import attempt_order_problems
from tests.services import wait_for
from tests.unit.workflows_recovery import CLOSURE_FAILURES

pytestmark = pytest.mark.django_db(transaction=True)

# Redis "down" (nothing listens on port 1): every enqueue fails, as if the job were lost.
REDIS_DOWN = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable", "DEFAULT_RETRY_DELAY": 0,
              "UNDISPATCHED_AFTER": "0s", "STALLED_AFTER": "0s"}


class RecordingSweeper(recovery.Sweeper):
    """A sweep that notes which runs it would pass instead of enqueueing them."""

    def __init__(self) -> None:
        super().__init__()
        self.passed: set[str] = set()

    def _pass(self, run_id) -> None:
        self.passed.add(str(run_id))


def test_a_parent_whose_child_ended_is_redriven_when_its_wake_up_was_lost():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        parent = pw.start_workflow("parent", {"child": "child_ok", "child_input": {"n": 2}})
        assert run_pass(parent.pk).kind == "paused"  # the child's first pass job is lost
        child = WorkflowRun.objects.get(parent_run=parent.pk)
        assert run_pass(child.pk).kind == "completed"  # the parent's wake-up is lost
        sweeper = RecordingSweeper()
        sweeper.sweep()
    assert str(parent.pk) in sweeper.passed
    with override_settings(PIKKU_WORKFLOWS={**REDIS_DOWN, "EXECUTOR": "inline"}):
        recovery.sweep()  # inline-only projects: the sweep runs the pass itself
    assert WorkflowRun.objects.get(pk=parent.pk).output == {"parent_saw": {"child_got": 4}}


def test_a_step_ended_beside_a_live_child_is_redriven_when_its_wake_up_was_lost(monkeypatch):
    # The worker that recorded the queued step's failure died before it drove the pass
    # (the fault test's SIGKILL): the live child must not hide the run from the sweep.
    monkeypatch.setattr(step_worker, "_carry_on", lambda run_id: None)
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        run = pw.start_workflow("child_beside_a_breaking_step")
        assert run_pass(run.pk).kind == "paused"
        assert run_queued_step(run.pk, "Broken", "q_breaks") == "failed"
        assert WorkflowRun.objects.get(parent_run=run.pk).status in ("running", "suspended")
        sweeper = RecordingSweeper()
        sweeper.sweep()
        assert str(run.pk) in sweeper.passed
        # Once a pass has seen the failure, the sweep leaves the run to its child.
        store.touch_run(run.pk)
        later = RecordingSweeper()
        later.sweep()
    assert str(run.pk) not in later.passed


def test_a_retried_closure_step_is_redriven_when_the_retry_pass_was_lost():
    CLOSURE_FAILURES["left"] = 1
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        run = pw.start_workflow("closure_fails_once")
        assert run_pass(run.pk).kind == "failed"
        pw.retry_run(run.pk)  # its pass job is lost
        assert WorkflowStep.objects.get(run=run).status == "pending"
        sweeper = RecordingSweeper()
        sweeper.sweep()
    assert str(run.pk) in sweeper.passed


def test_approval_reasons_that_share_a_prefix_are_separate_gates():
    run = pw.start_workflow("prefixed_gates", inline=True)
    assert run.error["message"] == "Manager sign-off"
    pw.approve_step(run.pk, "Manager", "early")  # recorded before its gate is reached
    run = pw.approve_step(run.pk, "Manager sign-off", "yes")
    assert run.status == "completed" and run.output["data"] == "early"


def test_a_decision_arriving_mid_pass_is_not_lost(monkeypatch):
    real = store.read_state_key
    reads = {"n": 0}

    def racing(run_id, name):
        reads["n"] += 1
        value = real(run_id, name)
        if reads["n"] == 1:  # the gate read "no decision"; approve_step commits right now
            store.merge_state_key(run_id, name, {
                "decision": {"ok": 1}, "decided_by": None,
                "decided_at": "2000-01-01T00:00:00+00:00", "errors": None})
        return value

    monkeypatch.setattr(store, "read_state_key", racing)
    run = pw.start_workflow("needs_approval", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    assert WorkflowRun.objects.get(pk=run.pk).output["data"] == {"ok": 1}


def test_lease_renewal_survives_a_failed_renewal():
    calls = []

    def renew():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database blip")

    with override_settings(PIKKU_WORKFLOWS={"LEASE_TIMEOUT": 0.15}), keep_alive(renew):
        # Renewed again after the failed renewal.
        wait_for(lambda: len(calls) >= 3, timeout=10, interval=0.05)


def test_a_stale_job_for_a_finished_step_leaves_the_run_alone():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        run = pw.start_workflow("one_queued", "x")
    WorkflowStep.objects.create(run_id=run.pk, step_name="Old", rpc_name="gone_fn",
                                status=StepStatus.SUCCEEDED, result=1)
    assert run_queued_step(str(run.pk), "Old", "gone_fn") == "duplicate"
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"


def test_a_job_for_an_in_pass_step_runs_nothing_on_a_step_worker():
    run = pw.start_workflow("retrying", {"fail_times": 5, "retries": 0}, inline=True)
    step = WorkflowStep.objects.get(run=run)
    WorkflowRun.objects.filter(pk=run.pk).update(status="running")
    WorkflowStep.objects.filter(pk=step.pk).update(status="pending")
    assert run_queued_step(str(run.pk), "Flaky", "flaky") == "not-queued"
    assert StepAttempt.objects.filter(step=step).count() == 1


def test_an_inline_step_timeout_fails_the_attempt_and_retries():
    run = pw.start_workflow("inline_timeout", 1, inline=True)
    assert run.status == "failed"
    attempts = StepAttempt.objects.filter(step__run=run).order_by("attempt")
    assert [a.error["type"] for a in attempts] == ["StepTimeoutError", "StepTimeoutError"]
    assert "exceeded its timeout of 0.2s" in attempts[0].error["message"]
    assert pw.start_workflow("inline_timeout", 0.01, inline=True).output == "finished"


def test_a_queued_step_timeout_limits_only_its_body():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        run = pw.start_workflow("queued_then_slow")
        assert run_pass(run.pk).kind == "paused"
        # The job continues the run: a 1.5s in-pass step after the 1s-limited queued one.
        assert run_queued_step(str(run.pk), "Q", "q_quick") == "succeeded"
    run = WorkflowRun.objects.get(pk=run.pk)
    assert run.status == "completed" and run.output == 2


def test_run_to_completion_waits_for_queued_steps_until_its_timeout():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            pw.run_to_completion("one_queued", "x", timeout=0.5)
    assert time.monotonic() - started >= 0.5


@pytest.mark.django_db
def test_a_pass_for_a_malformed_or_unknown_run_id_is_a_clear_error():
    for bad in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(pw.WorkflowRunNotFoundError, match="no workflow run has the id"):
            run_pass(bad)


@pytest.mark.django_db
def test_wake_up_jobs_take_runs_on_workers_whose_wait_is_over_not_inline_ones():
    past = timezone.now() - timedelta(seconds=1)
    runs = {}
    for inline in (True, False):
        run = WorkflowRun.objects.create(workflow="sleeps_a_week", inline=inline)
        WorkflowStep.objects.create(run=run, step_name="A week", status="scheduled",
                                    wake_at=past)
        runs[inline] = run.pk
    later = WorkflowRun.objects.create(workflow="sleeps_a_week", inline=False)
    WorkflowStep.objects.create(run=later, step_name="A week", status="scheduled",
                                wake_at=timezone.now() + timedelta(hours=1))
    assert store.due_runs(["sleeps_a_week"], limit=10) == [runs[False]]
    assert store.due_runs(["other"], limit=10) == []


def test_a_lost_attempt_is_stamped_by_the_engine_clock_and_its_retry_waits_its_delay():
    """Attempt timestamps used the wall clock, and the retry of a lost attempt came at once."""
    start = timezone.make_aware(datetime(2031, 1, 1, 12, 0))
    with registry.isolated(), override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), \
            fake_clock(start) as clock:
        @pw.workflow(name="lost_then_retried")
        def lost_then_retried(wf, data):
            return wf.do("Charge", "q_record", {"n": 1}, retries=2, retry_delay="10s")

        run = pw.start_workflow("lost_then_retried", {})
        run_pass(run.pk)  # its step job is lost: the step stays pending
        step = WorkflowStep.objects.get(run=run, step_name="Charge")
        assert store.claim_step(step) is not None  # a worker takes it, then dies
        clock.advance("1min")  # well past LEASE_TIMEOUT, with no real waiting
        RecordingSweeper().sweep()
    step.refresh_from_db()
    attempt = step.attempts.get()
    assert (step.status, step.error["type"]) == ("failed", "WorkerLost")
    assert attempt.running_at == start and attempt.failed_at == start + timedelta(minutes=1)
    assert step.wake_at == start + timedelta(minutes=1, seconds=10)
    assert attempt.created_at == start and attempt_order_problems() == []


def test_a_step_left_running_by_a_dead_pass_without_a_lease_is_redriven():
    """A pass that died mid-step once its run lease was gone stranded the run for good:
    the step, running under no lease, counted as in flight (found by tests/faults)."""
    with registry.isolated(), override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        @pw.workflow(name="dies_mid_step")
        def dies_mid_step(wf, data):
            return wf.do("Work", lambda: "done")

        run = pw.start_workflow("dies_mid_step", {})  # its pass job is lost
        step = WorkflowStep.objects.create(run=run, step_name="Work", status="running",
                                           attempt_count=1)
        StepAttempt.objects.create(step=step, attempt=1, status="running")
        sweeper = RecordingSweeper()
        sweeper.sweep()
        assert str(run.pk) in sweeper.passed
        assert run_pass(run.pk).kind == "completed"
    assert list(step.attempts.order_by("attempt").values_list("status", flat=True)) == [
        "failed", "succeeded"]


@pytest.mark.parametrize("path", ["one-statement", "look-then-claim"])
def test_a_relayed_step_job_records_the_same_rows_on_every_path(monkeypatch, path):
    """A step job's claim by name, its success with the run's lease (and the replay
    snapshot), and the next step inserted with the lease's release (PostgreSQL), or the
    separate statements of the other databases and of the fallback: the same rows."""
    from pikku_workflows.engine.store.backends import backend
    from pikku_workflows.runtime import orchestrator
    from tests.testapp.models import Ledger

    if path == "look-then-claim":
        writer = backend()
        monkeypatch.setattr(store, "claim_named_step", lambda *args: None)
        monkeypatch.setattr(writer, "record_success_and_lease",
                            lambda step_id, attempt, result, now, *rest: (
                                writer.record_success(step_id, attempt, result, now), None))
    snapshots = []
    real_run_pass = orchestrator.run_pass

    def checked_run_pass(run_id, **kwargs):
        leased = kwargs.get("leased")
        if leased is not None and leased.steps is not None:
            snapshots.append((leased.steps, store.load_steps(run_id)))
        return real_run_pass(run_id, **kwargs)

    monkeypatch.setattr(orchestrator, "run_pass", checked_run_pass)
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        run = pw.start_workflow("one_queued", "x")
        assert run_pass(run.pk).kind == "paused"
        step = WorkflowStep.objects.get(run=run)
        # In with the lease's release, already scheduled (its job then failed to go out).
        assert step.status == StepStatus.SCHEDULED
        assert WorkflowRun.objects.get(pk=run.pk).lease_owner == ""
        assert run_queued_step(str(run.pk), "Only", "q_record") == "succeeded"
    finished = WorkflowRun.objects.get(pk=run.pk)
    assert (finished.status, finished.output, finished.lease_owner) == ("completed", "x", "")
    step = WorkflowStep.objects.get(run=run)
    assert (step.status, step.result, step.attempt_count, step.lease_expires_at) == (
        StepStatus.SUCCEEDED, "x", 1, None)
    attempt = StepAttempt.objects.get(step=step)
    assert (attempt.attempt, attempt.status, attempt.result) == (1, StepStatus.SUCCEEDED, "x")
    assert attempt.scheduled_at is not None and attempt.running_at is not None
    assert attempt.succeeded_at is not None and attempt_order_problems() == []
    assert Ledger.objects.count() == 1
    from django.db import connection

    if path == "one-statement" and connection.vendor == "postgresql":
        assert len(snapshots) == 1
    for snapshot, loaded in snapshots:
        assert list(snapshot) == list(loaded)
        for name, row in loaded.items():
            for field in WorkflowStep._meta.concrete_fields:
                assert getattr(snapshot[name], field.attname) == getattr(row, field.attname), \
                    (name, field.attname)


def test_a_deferred_step_goes_in_with_the_release_only_while_the_lease_is_ours():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN):
        run = pw.start_workflow("one_queued", "x")
    owner = store.new_lease_owner()
    assert store.take_lease(run.pk, owner) is not None
    sent: list[str] = []

    def deferred(work, name):
        step = store.new_step(run.pk, name, rpc_name="q_record", retries=0, retry_delay="0")
        step.status = StepStatus.SCHEDULED
        work.defer_new_step(step, lambda: sent.append(name))
        return step

    not_ours = store.UnitOfWork(run.pk, "not-the-owner")
    deferred(not_ours, "Only")
    assert not_ours.release_lease() == frozenset()
    assert not WorkflowStep.objects.filter(run=run).exists()
    assert sent == []
    ours = store.UnitOfWork(run.pk, owner)
    step = deferred(ours, "Only")
    assert ours.release_lease() == {"Only"}
    row = WorkflowStep.objects.get(run=run)
    assert (row.pk, row.status, row.rpc_name) == (step.pk, StepStatus.SCHEDULED, "q_record")
    assert sent == ["Only"]
    assert WorkflowRun.objects.get(pk=run.pk).lease_owner == ""
