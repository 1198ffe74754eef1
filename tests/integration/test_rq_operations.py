"""Queues, enqueue failures, health and the worker command's options."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine.dispatch import all_queue_names
from pikku_workflows.executors.rq import DRAIN_STEPS, WAKE_DUE, get_queue, worker_health
from pikku_workflows.executors.worker import COMMAND_POLL, PikkuWorker
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.testing import fake_clock
from tests.services import sweep_after, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_dedicated_queues_route_runs_and_steps(workers):
    assert {"pikku-test-dedicated-runs", "pikku-test-dedicated-steps"} <= set(all_queue_names())
    run = pw.start_workflow("isolated", 5)
    assert get_queue("pikku-test-dedicated-runs").count == 1
    assert get_queue("pikku-workflow-orchestrator").count == 0
    workers.run("pikku_worker", "--burst", "--queues", "pikku-test-dedicated-runs")
    assert get_queue("pikku-test-dedicated-steps").count == 1
    assert get_queue("pikku-workflow-step-worker").count == 0
    workers.start(1)  # listens on every queue the registry knows
    done = wait_for(lambda: WorkflowRun.objects.filter(pk=run.pk, status="completed").first())
    assert done.output == {"isolated": 5}


def test_a_redis_error_while_enqueueing_leaves_the_run_to_recovery(workers, rq_settings):
    with override_settings(PIKKU_WORKFLOWS={**rq_settings, "RQ_CONNECTION": "unreachable"}):
        run = pw.start_workflow("one_queued", "through the outage")  # no exception
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"
    assert not WorkflowStep.objects.filter(run=run).exists()
    assert sweep_after(2)["undispatched"] == 1  # older than UNDISPATCHED_AFTER (1 s)
    workers.start(1)
    done = wait_for(lambda: WorkflowRun.objects.filter(pk=run.pk, status="completed").first())
    assert done.output == "through the outage"


def test_a_step_dispatch_failure_leaves_the_step_to_recovery(workers, rq_settings):
    from pikku_workflows.runtime.orchestrator import run_pass

    run = pw.start_workflow("one_queued", "x")
    get_queue("pikku-workflow-orchestrator").empty()
    with override_settings(PIKKU_WORKFLOWS={**rq_settings, "RQ_CONNECTION": "unreachable"}):
        assert run_pass(run.pk).kind == "paused"
    step = WorkflowStep.objects.get(run=run)
    # Committed (scheduled, with the lease's release) before its job was sent; the job
    # never reached Redis, and the recovery sweep re-dispatches it.
    assert step.status == "scheduled"
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"
    assert sweep_after(2)["undispatched"] == 1  # older than UNDISPATCHED_AFTER (1 s)
    workers.start(1)
    assert wait_for(lambda: WorkflowRun.objects.filter(pk=run.pk, status="completed").first())


def test_worker_health_lists_live_workers(workers):
    assert worker_health() == []
    workers.start(2, "--queues", "pikku-workflow-orchestrator", "pikku-workflow-step-worker")
    health = worker_health()
    assert len(health) == 2
    assert all(h["last_heartbeat"] is not None for h in health)
    assert all("pikku-workflow-orchestrator" in h["queues"] for h in health)


def test_workers_option_starts_several_processes(workers):
    workers.start(1, "--workers", "3", expect=3)
    assert len(worker_health()) == 3
    runs = [pw.start_workflow("one_queued", i) for i in range(6)]
    for run in runs:
        assert wait_for(lambda r=run: WorkflowRun.objects.filter(
            pk=r.pk, status="completed").exists())


def test_recovery_leaves_work_whose_job_still_waits_in_a_backlog(rq_settings, redis_conn):

    run = pw.start_workflow("one_queued", "waiting")  # its job waits: no worker runs
    queue = get_queue("pikku-workflow-orchestrator")
    assert queue.count == 1
    # Older than UNDISPATCHED_AFTER (1 s), but behind the queue's head: not lost, left alone.
    assert sweep_after(2)["undispatched"] == 0
    assert queue.count == 1
    redis_conn.flushdb()  # now its job is lost
    assert sweep_after(2)["undispatched"] == 1
    # A re-driven run is a run in flight: its pass goes to the queue served first.
    assert get_queue("pikku-workflow-orchestrator.wake").get_job_ids()
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"


def test_sweeps_add_one_pass_per_run_however_long_the_backlog(rq_settings, redis_conn):
    """A parent whose child ended waits for its pass behind a backlog: no sweep adds
    another pass meanwhile, and once its pass is lost only the first sweep re-drives it
    (every sweep of every worker added one: the backlog fed itself)."""
    from pikku_workflows.executors.jobs import orchestrate
    from pikku_workflows.executors.rq import run_passes
    from pikku_workflows.runtime.recovery import sweep

    queue = "pikku-workflow-orchestrator"

    def woken():  # the runs waiting in the list of woken runs for their pass
        return [entry.split()[0].decode()
                for entry in redis_conn.lrange(f"pikku:passes:{queue}", 0, -1)]

    parent = pw.start_workflow("parent", {"child": "child_ok"})
    get_queue(queue).empty()
    assert orchestrate(str(parent.pk)) == "paused"  # waits for its child
    [child] = woken()
    redis_conn.delete(f"pikku:passes:{queue}")
    orchestrate(child)
    assert WorkflowRun.objects.get(pk=child).status == "completed"
    assert woken() == [str(parent.pk)]  # the parent's pass, as its child ended
    for _ in range(3):
        sweep()
        assert woken() == [str(parent.pk)]
    redis_conn.flushdb()  # now that pass is lost
    assert sweep()["undispatched"] == 1
    for _ in range(3):
        sweep()
    assert woken() == [str(parent.pk)]
    assert run_passes(queue) == 1
    assert WorkflowRun.objects.get(pk=parent.pk).status == "completed"


def test_a_fan_outs_jobs_go_out_together_and_a_redis_error_leaves_them_pending(
        workers, rq_settings):
    from pikku_workflows.runtime.orchestrator import run_pass

    sent = pw.start_workflow("queued_fan_out", {"n": 5})
    lost = pw.start_workflow("queued_fan_out", {"n": 5})
    get_queue("pikku-workflow-orchestrator").empty()
    assert run_pass(sent.pk).kind == "paused"
    # Two drain jobs share the five steps (no worker is up: two is the least).
    jobs = get_queue("pikku-workflow-step-worker").get_jobs()
    drain = (DRAIN_STEPS, [str(sent.pk), ["q_record"]])
    assert [(j.func_name, j.args) for j in jobs] == [drain] * 2
    assert set(WorkflowStep.objects.filter(run=sent).values_list("status", flat=True)) == {
        "scheduled"}
    with override_settings(PIKKU_WORKFLOWS={**rq_settings, "RQ_CONNECTION": "unreachable"}):
        assert run_pass(lost.pk).kind == "paused"  # no exception: recovery takes over
    assert set(WorkflowStep.objects.filter(run=lost).values_list("status", flat=True)) == {
        "pending"}
    # The worker runs the drain jobs; its own recovery sweep (every second) re-drives the
    # pending steps once they are older than UNDISPATCHED_AFTER and no backlog is ahead.
    workers.start(1)
    for run in (sent, lost):
        done = wait_for(lambda r=run: WorkflowRun.objects.filter(pk=r.pk,
                                                                 status="completed").first())
        assert done.output == list(range(5))


def test_wake_ups_have_their_own_queue_which_workers_serve_first(rq_settings, redis_conn):
    from pikku_workflows.engine.dispatch import with_wake_queues
    from pikku_workflows.executors.jobs import orchestrate

    names = all_queue_names()
    assert names[0] == "pikku-workflow-orchestrator.wake"
    assert "pikku-test-dedicated-runs.wake" in names[:names.index("pikku-workflow-orchestrator")]
    assert with_wake_queues(["pikku-workflow-step-worker"]) == ["pikku-workflow-step-worker"]
    assert with_wake_queues(["pikku-workflow-orchestrator"]) == [
        "pikku-workflow-orchestrator.wake", "pikku-workflow-orchestrator"]
    # Sleeps ending in the same 100 ms share one wake-up job for their queue.
    runs = [pw.start_workflow("naps", {"nap": "30s"}) for _ in range(3)]
    get_queue("pikku-workflow-orchestrator").empty()
    start = timezone.now()
    for run in runs:
        with fake_clock(start):  # all three fall due at the same instant
            assert orchestrate(str(run.pk)) == "paused"
    wake_queue = get_queue("pikku-workflow-orchestrator.wake")
    [job_id] = wake_queue.scheduled_job_registry.get_job_ids()
    job = wake_queue.fetch_job(job_id)
    assert (job.func_name, job.args) == (WAKE_DUE, ["pikku-workflow-orchestrator"])
    # Once that job has left the scheduled registry (it may be running), a wake-up in
    # the same window cannot count on it, and sends a job of its own.
    wake_queue.scheduled_job_registry.remove(job_id)
    late = pw.start_workflow("naps", {"nap": "30s"})
    get_queue("pikku-workflow-orchestrator").empty()
    with fake_clock(start):
        assert orchestrate(str(late.pk)) == "paused"
    [second] = wake_queue.scheduled_job_registry.get_job_ids()
    assert second != job_id


def test_a_wake_up_job_carries_on_every_run_whose_wait_is_over(rq_settings, redis_conn):
    from pikku_workflows.executors.jobs import orchestrate, wake_due

    runs = [pw.start_workflow("naps", {"nap": "1s", "tag": i}) for i in range(3)]
    get_queue("pikku-workflow-orchestrator").empty()
    for run in runs:
        assert orchestrate(str(run.pk)) == "paused"
    assert wake_due("pikku-workflow-orchestrator") == "0 woken"  # not due yet
    with fake_clock(timezone.now() + timedelta(seconds=2)):  # the naps (1 s) are over
        assert wake_due("pikku-workflow-orchestrator") == "3 woken"
    # Each run got past its sleep and sent its next (queued) step to a step worker.
    naps = WorkflowStep.objects.filter(run__in=runs, step_name="Nap")
    assert set(naps.values_list("status", flat=True)) == {"succeeded"}
    after = WorkflowStep.objects.filter(run__in=runs, step_name="After")
    assert set(after.values_list("status", flat=True)) == {"scheduled"}
    assert wake_due("pikku-workflow-orchestrator") == "0 woken"


def test_sleeps_wake_through_the_scheduler_alone_to_the_millisecond(workers, redis_conn):
    """RQ scores scheduled jobs in whole seconds: a wake-up due at x.5 s ran at x.0,
    found nothing due, and the run waited for a recovery sweep (none here)."""
    workers.start(1, "--sweep-interval", "0")
    registry = get_queue("pikku-workflow-orchestrator.wake").scheduled_job_registry
    for nap in ("1300ms", "1700ms", "1100ms"):
        run = pw.start_workflow("naps", {"nap": nap}, inline=False)
        sleeping = WorkflowStep.objects.filter(run=run, step_name="Nap", wake_at__isnull=False)
        step = wait_for(sleeping.first)
        [(_, score)] = redis_conn.zrange(registry.key, 0, -1, withscores=True)
        assert score == pytest.approx(step.wake_at.timestamp(), abs=0.1)
        done = WorkflowRun.objects.filter(pk=run.pk, status="completed")
        wait_for(done.exists, timeout=20)


def test_another_workers_scheduler_takes_over_from_a_killed_one(workers, redis_conn):
    """RQ's scheduler lock outlived a SIGKILLed holder by a minute, and other workers
    tried to take it only at their start or every 10 minutes: sleeps stopped waking."""
    lock = "rq:scheduler-lock:pikku-workflow-orchestrator.wake"
    [first] = workers.start(1, "--sweep-interval", "0")
    holder = wait_for(lambda: redis_conn.get(lock))
    workers.start(1, "--sweep-interval", "0")
    workers.kill(first)
    wait_for(lambda: redis_conn.get(lock) not in (None, holder), timeout=20)
    run = pw.start_workflow("naps", {"nap": "500ms"}, inline=False)
    wait_for(WorkflowRun.objects.filter(pk=run.pk, status="completed").exists, timeout=20)


def test_two_schedulers_never_move_one_job_twice(rq_settings, redis_conn):
    """RQ reads the due jobs, enqueues them, then removes them: a scheduler whose lock
    lapsed while it was slow enqueued again what another had just moved."""
    from pikku_workflows.executors.worker import PikkuScheduler

    queue = get_queue("pikku-workflow-orchestrator.wake")
    queue.enqueue_at(timezone.now(), WAKE_DUE, "pikku-workflow-orchestrator")
    slow, fast = (PikkuScheduler([queue], connection=redis_conn) for _ in range(2))
    for scheduler in (slow, fast):
        scheduler._acquired_locks = {queue.name}  # both believe they hold the lock
        scheduler.prepare_registries()
    [registry] = slow._scheduled_job_registries
    stale = registry.get_jobs_to_schedule()
    fast.enqueue_scheduled_jobs()
    registry.get_jobs_to_schedule = lambda *args: stale  # slow read before fast moved
    slow.enqueue_scheduled_jobs()
    assert queue.count == 1


def test_a_burst_worker_opens_no_command_channel(rq_settings, redis_conn):
    # RQ's teardown waits for its listener thread's read to end: a burst worker has
    # none, and a long-lived one reads in short polls, so ending either is prompt.
    queues = [get_queue(name) for name in all_queue_names()]
    burst = PikkuWorker(queues, connection=redis_conn, serializer=queues[0].serializer)
    burst.work(burst=True, logging_level="WARNING")
    assert burst.pubsub_thread is None

    serving = PikkuWorker(queues, connection=redis_conn, serializer=queues[0].serializer)
    serving.subscribe()
    try:
        assert serving.pubsub_thread.is_alive()
        assert serving.pubsub_thread.sleep_time == COMMAND_POLL
    finally:
        serving.unsubscribe()
    assert not serving.pubsub_thread.is_alive()
