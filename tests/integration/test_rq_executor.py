"""The RQ executor end to end: real PostgreSQL, real Redis, real pikku_worker processes."""

from __future__ import annotations

import itertools

import pytest

import pikku_workflows as pw
from pikku_workflows.executors.jobs import orchestrate
from pikku_workflows.executors.rq import DRAIN_STEPS, ORCHESTRATE, RUN_STEP, get_queue
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from tests.services import sweep_after, wait_for
from tests.testapp.models import Ledger

pytestmark = pytest.mark.django_db(transaction=True)


def settled(run_id, statuses=("completed", "failed", "cancelled")):
    return lambda: WorkflowRun.objects.filter(pk=run_id, status__in=statuses).first()


def test_ten_steps_with_five_queued_complete_on_two_workers(workers):
    workers.start(2)
    runs = [pw.start_workflow("ten_steps", {}) for _ in range(3)]
    assert all(run.status == "running" and not run.inline for run in runs)
    for run in runs:
        done = wait_for(settled(run.pk))
        assert done.status == "completed" and done.output == sum(range(10))
        steps = WorkflowStep.objects.filter(run=run)
        assert steps.count() == 10 and all(s.attempt_count == 1 for s in steps)
    assert Ledger.objects.count() == 15  # 5 queued steps x 3 runs, once each
    # A worker serving the step queue ran each sequential queued step it reached itself:
    # no step job went through Redis (a dispatched step's attempt records scheduled_at).
    queued = StepAttempt.objects.filter(step__run__in=runs, step__rpc_name="q_record")
    assert queued.count() == 15 and not queued.filter(scheduled_at__isnull=False).exists()


def test_without_eager_steps_every_queued_step_is_a_step_job(workers):
    workers.settings = {**workers.settings, "EAGER_QUEUED_STEPS": False}
    workers.start(2)
    run = pw.start_workflow("ten_steps", {})
    assert wait_for(settled(run.pk)).status == "completed"
    queued = StepAttempt.objects.filter(step__run=run, step__rpc_name="q_record")
    assert queued.count() == 5 and not queued.filter(scheduled_at__isnull=True).exists()


def test_an_orchestrator_only_worker_sends_queued_steps_to_step_workers(workers):
    workers.start(1, "--queues", "pikku-workflow-orchestrator")
    run = pw.start_workflow("ten_steps", {})
    wait_for(lambda: WorkflowStep.objects.filter(run=run, step_name="Step 1",
                                                 status="scheduled").exists())
    workers.start(1, "--queues", "pikku-workflow-step-worker")
    assert wait_for(settled(run.pk)).status == "completed"
    # The first queued step went through Redis; the step worker that ran it carried the
    # run on and ran the later ones itself.
    first = StepAttempt.objects.get(step__run=run, step__step_name="Step 1")
    assert first.scheduled_at is not None
    assert StepAttempt.objects.filter(step__run=run, step__rpc_name="q_record").count() == 5


def test_a_sleep_holds_no_worker(workers):
    workers.start(1)
    sleeper = pw.start_workflow("naps", {"nap": "4s", "tag": "slept"})
    wait_for(lambda: WorkflowStep.objects.filter(run=sleeper, step_name="Nap").exists())
    quick = wait_for(settled(pw.start_workflow("one_queued", "quick").pk), timeout=10)
    # Done on the only worker while the other run still sleeps.
    assert quick.finished_at < WorkflowStep.objects.get(run=sleeper, step_name="Nap").wake_at
    done = wait_for(settled(sleeper.pk), timeout=20)
    assert done.status == "completed" and done.output == "slept"
    nap = WorkflowStep.objects.get(run=sleeper, step_name="Nap")
    assert nap.status == "succeeded" and nap.updated_at >= nap.wake_at


def test_sigkill_mid_step_then_recovery_finishes_with_one_side_effect(workers):
    [victim] = workers.start(1)
    run = pw.start_workflow("slow_charge", {"first_attempt_seconds": 60})
    wait_for(lambda: Ledger.objects.exists() and WorkflowStep.objects.filter(
        run=run, step_name="Charge", status="running").exists())
    workers.kill(victim)
    # Once LEASE_TIMEOUT (2 s) has passed, the dead worker's lease has expired.
    assert sweep_after(3)["dead_leases"] == 1
    workers.start(1)
    done = wait_for(settled(run.pk), timeout=30)
    assert done.status == "completed" and done.output == {"charged": True, "attempt": 2}
    step = WorkflowStep.objects.get(run=run, step_name="Charge")
    attempts = list(StepAttempt.objects.filter(step=step).order_by("attempt"))
    assert [(a.attempt, a.status) for a in attempts] == [(1, "failed"), (2, "succeeded")]
    assert attempts[0].error["type"] == "WorkerLost"
    assert Ledger.objects.count() == 1  # once per invocation_id


def test_redis_flushed_mid_run_then_recover_and_finish(workers, redis_conn):
    runs = [pw.start_workflow("ten_steps", {}) for _ in range(2)]
    runs.append(pw.start_workflow("naps", {"nap": "1s"}))
    redis_conn.flushdb()  # every job and schedule is gone; the rows remain
    assert sweep_after(2)["undispatched"] == 3  # older than UNDISPATCHED_AFTER (1 s)
    workers.start(2)
    for run in runs:
        assert wait_for(settled(run.pk), timeout=40).status == "completed"


def first_pass_here(run):
    """Run the run's first orchestrator pass in this process (it dispatches the step job)."""
    orchestrate(str(run.pk))
    return WorkflowStep.objects.get(run=run)


def test_a_duplicated_step_job_executes_once(workers):
    run = pw.start_workflow("one_queued", "dup")
    step = first_pass_here(run)
    assert step.status == "scheduled"
    queue = get_queue("pikku-workflow-step-worker")
    queue.enqueue(RUN_STEP, str(run.pk), "Only", "q_record", result_ttl=0)  # a duplicate
    workers.start(1)
    assert wait_for(settled(run.pk)).status == "completed"
    step.refresh_from_db()
    assert step.attempt_count == 1 and StepAttempt.objects.filter(step=step).count() == 1
    assert Ledger.objects.count() == 1


def test_a_forged_job_naming_another_function_runs_nothing(workers):
    run = pw.start_workflow("one_queued", "forged")
    first_pass_here(run)
    get_queue("pikku-workflow-step-worker").empty()  # only the forged jobs remain
    queue = get_queue("pikku-workflow-step-worker")
    forged = queue.enqueue(RUN_STEP, str(run.pk), "Only", "q_slow_charge", result_ttl=60)
    foreign = queue.enqueue("tests.testapp.shared.collect_audit", {"x": 1}, result_ttl=60)
    workers.run("pikku_worker", "--burst")
    step = WorkflowStep.objects.get(run=run, step_name="Only")
    assert step.status in ("pending", "scheduled") and step.attempt_count == 0
    assert Ledger.objects.count() == 0
    forged.refresh()
    assert forged.return_value() == "mismatch"
    foreign.refresh()
    assert foreign.get_status() == "failed"


def test_a_drain_job_runs_only_the_runs_recorded_queued_steps(workers):
    run = pw.start_workflow("one_queued", "drained")
    first_pass_here(run)
    queue = get_queue("pikku-workflow-step-worker")
    queue.empty()
    forged = [queue.enqueue(DRAIN_STEPS, str(run.pk), names, result_ttl=60)
              for names in (["q_slow_charge"], ["echo"], ["no_such_fn"])]
    workers.run("pikku_worker", "--burst")
    for job in forged:
        job.refresh()
        assert job.return_value() == "empty"
    assert Ledger.objects.count() == 0
    drain = queue.enqueue(DRAIN_STEPS, str(run.pk), ["q_record"], result_ttl=60)
    duplicate = queue.enqueue(DRAIN_STEPS, str(run.pk), ["q_record"], result_ttl=60)
    workers.run("pikku_worker", "--burst")
    drain.refresh()
    duplicate.refresh()
    assert (drain.return_value(), duplicate.return_value()) == ("1 succeeded", "empty")
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    assert Ledger.objects.count() == 1


def test_two_orchestrator_jobs_at_once_run_the_body_steps_once(workers):
    run = pw.start_workflow("ten_steps", {})
    queue = get_queue("pikku-workflow-orchestrator")
    for _ in range(3):
        queue.enqueue(ORCHESTRATE, str(run.pk), result_ttl=0)
    workers.start(2)
    assert wait_for(settled(run.pk)).status == "completed"
    assert StepAttempt.objects.filter(step__run=run).count() == 10
    assert Ledger.objects.count() == 5


def test_queued_retries_and_timeouts_are_attempts(workers):
    workers.start(1)
    flaky = pw.start_workflow("queued_retry", {"fail_times": 2})
    slow = pw.start_workflow("queued_timeout", {})
    done = wait_for(settled(flaky.pk))
    assert done.status == "completed" and done.output == 3
    assert StepAttempt.objects.filter(step__run=flaky).count() == 3
    failed = wait_for(settled(slow.pk), timeout=30)
    assert failed.status == "failed" and failed.error["code"] == "STEP_FAILED"
    attempt = StepAttempt.objects.get(step__run=slow)
    assert attempt.status == "failed" and "timeout" in attempt.error["message"].lower()


def test_queued_parallel_fan_out_joins(workers):
    workers.start(2)
    run = pw.start_workflow("queued_fan_out", {"n": 20})
    done = wait_for(settled(run.pk))
    assert done.status == "completed" and done.output == list(range(20))
    # A fan-out's steps are spread over the workers as step jobs, never run eagerly.
    attempts = StepAttempt.objects.filter(step__run=run)
    assert attempts.count() == 20 and not attempts.filter(scheduled_at__isnull=True).exists()


def test_a_fan_out_of_flaky_queued_steps_retries_each_on_the_workers(workers):
    workers.start(2)
    run = pw.start_workflow("flaky_fan_out", {"n": 12, "fail_times": 1})
    done = wait_for(settled(run.pk))
    assert done.status == "completed" and done.output == [2] * 12
    attempts = StepAttempt.objects.filter(step__run=run)
    assert attempts.count() == 24
    assert sorted(attempts.values_list("status", flat=True)) == ["failed"] * 12 + [
        "succeeded"] * 12


def test_an_in_pass_retry_delay_is_woken_by_a_wake_up_job(workers):
    workers.start(1)
    run = pw.start_workflow("inline_retry_after_a_delay", {"delay": "1s"})
    done = wait_for(settled(run.pk))
    assert done.status == "completed" and done.output == {"ok": True, "attempt": 2}
    failed, succeeded = StepAttempt.objects.filter(step__run=run).order_by("attempt")
    assert (succeeded.running_at - failed.failed_at).total_seconds() >= 1


def test_cancelled_runs_pending_jobs_do_nothing(workers):
    run = pw.start_workflow("one_queued", "cancelled")
    first_pass_here(run)
    pw.cancel_run(run.pk, "changed my mind")
    workers.run("pikku_worker", "--burst")
    assert Ledger.objects.count() == 0
    assert WorkflowRun.objects.get(pk=run.pk).status == "cancelled"


def test_queued_step_without_rq_is_a_clear_error(settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "inline"}
    run = pw.start_workflow("one_queued", "x")
    assert run.status == "failed"
    assert "queued=True" in run.error["message"] and "EXECUTOR" in run.error["message"]


def test_graph_workflows_on_workers(workers):
    workers.start(2)
    fanned = pw.start_workflow("queued_graph", {"values": [1, 2, 3, 4]})
    branching = pw.start_workflow("user_onboarding", {"email": "w@example.com", "name": "W",
                                                      "ok": True})
    looping = pw.start_workflow("loops", {"times": 2})
    done = wait_for(settled(fanned.pk))
    assert done.status == "completed" and done.output == 30
    keys = set(WorkflowStep.objects.filter(run=fanned).values_list("step_name", flat=True))
    assert keys == {"numbers", "square[0]", "square[1]", "square[2]", "square[3]", "sum"}
    assert wait_for(settled(branching.pk)).output["activate"] == {"activated": 7}
    assert wait_for(settled(looping.pk)).output == {"visits": 2}


def test_graph_joins_sequential_fan_out_and_on_error_on_workers(workers):
    workers.start(2)
    diamond = pw.start_workflow("queued_diamond", {"n": 3, "m": 4})
    sequential = pw.start_workflow("queued_sequential", {"values": [1, 2, 3]})
    failing = pw.start_workflow("queued_on_error", {"order": 1})
    assert wait_for(settled(diamond.pk)).output == 14
    assert WorkflowStep.objects.filter(run=diamond, step_name="join").count() == 1
    done = wait_for(settled(sequential.pk))
    assert done.output == 14
    squares = WorkflowStep.objects.filter(run=sequential, step_name__startswith="square")
    # Sequential: each item started only after the previous one succeeded.
    ordered = sorted(squares, key=lambda s: s.step_name)
    assert all(a.updated_at <= b.created_at for a, b in itertools.pairwise(ordered))
    failed = wait_for(settled(failing.pk))
    assert failed.status == "failed" and failed.error["code"] == "GRAPH_NODE_FAILED"
    assert StepAttempt.objects.filter(step__run=failing, step__step_name="charge").count() == 2
    cleanup = WorkflowStep.objects.get(run=failing, step_name="cleanup")
    assert cleanup.status == "succeeded" and cleanup.data["input"] == {"order": 1}


def test_a_queued_graph_node_waiting_for_a_delayed_retry_keeps_the_run_going(workers):
    """Same on workers as inline: never terminal while a node can still retry."""
    workers.start(1)
    run = pw.start_workflow("queued_graph_retry_after_delay", {"fail_times": 1})
    done = wait_for(settled(run.pk))
    assert done.status == "completed" and done.output == {"charged": 2}
    first, second = StepAttempt.objects.filter(
        step__run=run, step__step_name="charge").order_by("attempt")
    assert (first.status, second.status) == ("failed", "succeeded")
    assert (second.running_at - first.failed_at).total_seconds() >= 0.3
