"""Schedule-to-start latency (``pikku_workflow_schedule_to_start_seconds``, from the
``job_started`` signal of the worker) and the queue gauges read at scrape time, on a real
Redis with the rq executor's jobs run in this process (``drain_queues``, a PikkuWorker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows import signals
from pikku_workflows.engine.dispatch import get_executor
from pikku_workflows.executors.rq import get_queue, job_ready_at
from pikku_workflows.testing import drain_queues
from tests.unit.test_metrics import Delta, _scrape
from tests.unit.test_metrics import metrics_on as metrics_on  # the fixture

pytestmark = pytest.mark.django_db(transaction=True)

ORCHESTRATOR = "pikku-workflow-orchestrator"
STEPS = "pikku-workflow-step-worker"


def latency(kind: str, queue: str) -> tuple:
    return ("pikku_workflow_schedule_to_start_seconds_count", {"kind": kind, "queue": queue})


def test_passes_and_steps_are_observed_per_queue(metrics_on, rq_executor):
    delta = Delta(latency("pass", ORCHESTRATOR), latency("step", STEPS),
                  latency("pass", f"{ORCHESTRATOR}.wake"))
    runs = [pw.start_workflow("one_queued", i) for i in range(2)]
    drain_queues()
    for run in runs:
        run.refresh_from_db()
        assert run.status == "completed"
    # Each run: its first pass from the orchestrator queue, its step from the step queue
    # (the step's worker carries the run on in the same job: no other pass job).
    assert delta() == [2, 2, 0]


def test_the_signal_names_the_job_and_when_it_was_ready(rq_executor):
    seen = []

    def receiver(sender, **kwargs):
        seen.append(kwargs)

    signals.job_started.connect(receiver)
    try:
        run = pw.start_workflow("one_queued", 7)
        drain_queues()
    finally:
        signals.job_started.disconnect(receiver)
    assert [(s["kind"], s["queue"]) for s in seen] == [("pass", ORCHESTRATOR),
                                                      ("step", STEPS)]
    for started in seen:
        assert set(started) == {"signal", "kind", "queue", "job_id", "ready_at",
                                "started_at"}
        assert started["ready_at"] <= started["started_at"]
        assert started["ready_at"] >= run.created_at - timedelta(seconds=1)
        assert started["job_id"]


def test_a_delayed_job_counts_from_its_due_time(rq_executor):
    """RQ's ``enqueued_at`` of a delayed job is when a scheduler moved it to its queue,
    which would hide a late scheduler: the job carries its due time."""
    run = pw.start_workflow("one_queued", 1)
    due = timezone.now() + timedelta(minutes=5)
    get_executor(inline=False).enqueue_pass(run.pk, at=due)  # on commit: now, autocommit
    queue = get_queue(f"{ORCHESTRATOR}.wake")
    job_id, = queue.scheduled_job_registry.get_job_ids()
    delayed = queue.fetch_job(job_id)
    assert job_ready_at(delayed).timestamp() == pytest.approx(due.timestamp(), abs=1e-3)
    immediate = get_queue(ORCHESTRATOR).jobs[0]
    assert immediate.meta == {} and immediate.enqueued_at is not None
    assert job_ready_at(immediate) == immediate.enqueued_at


def test_the_queue_gauges_are_read_at_scrape_time(client, metrics_on, rq_executor):
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    for i in range(3):
        pw.start_workflow("one_queued", i)
    samples = _scrape(client)
    depth = ("pikku_workflow_queue_depth", (("queue", ORCHESTRATOR),))
    oldest = ("pikku_workflow_queue_oldest_job_seconds", (("queue", ORCHESTRATOR),))
    assert samples[depth] == 3
    assert samples[oldest] >= 0
    assert samples[("pikku_workflow_queue_depth", (("queue", STEPS),))] == 0
    assert ("pikku_workflow_queue_oldest_job_seconds", (("queue", STEPS),)) not in samples
    drain_queues()
    samples = _scrape(client)
    assert samples[depth] == 0 and oldest not in samples


def test_without_redis_or_with_inline_runs_the_scrape_has_no_queue_sample(client,
                                                                          metrics_on):
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    pw.start_workflow("sequential", {"x": 1}, inline=True)
    for settings in ({"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}, {}):
        with override_settings(PIKKU_WORKFLOWS=settings):
            samples = _scrape(client)  # 200: the other metrics still answer
        assert not [key for key in samples if key[0].startswith("pikku_workflow_queue_")]
        assert ("pikku_workflow_runs_total",
                (("status", "completed"), ("workflow", "sequential"))) in samples
