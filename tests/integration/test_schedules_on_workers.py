"""Delayed starts and schedules with real processes: a ``pikku_worker`` (the RQ executor)
promotes delayed runs from the database, Redis flushed or not; ``pikku_scheduler`` runs an
inline deployment's delayed starts and schedule ticks."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowSchedule
from pikku_workflows.status import RunStatus
from tests.processes import ROOT
from tests.services import SETTINGS, Workers, wait_for


def first_attempt_at(run):
    return StepAttempt.objects.filter(step__run=run).order_by("created_at").values_list(
        "created_at", flat=True).first()


def test_a_delayed_start_starts_on_a_worker_at_its_time_not_before(workers):
    workers.start(1)
    run = pw.start_workflow("sched_echo", {"n": 1}, delay="2s")
    assert run.status == RunStatus.SCHEDULED
    wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
             timeout=30)
    run.refresh_from_db()
    assert first_attempt_at(run) >= run.start_at
    assert run.output == {"data": {"n": 1}, "scheduled_at": None}


def test_a_delayed_start_survives_losing_every_redis_key(workers, redis_conn):
    workers.start(1)
    run = pw.start_workflow("sched_echo", {"n": 2}, delay="3s")
    redis_conn.flushdb()  # whatever Redis held about it is gone: the database is the truth
    wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
             timeout=40)
    run.refresh_from_db()
    assert first_attempt_at(run) >= run.start_at


def test_a_cancelled_delayed_start_never_runs_on_a_worker(workers):
    workers.start(1)
    run = pw.start_workflow("sched_echo", {}, delay="1s")
    pw.cancel_run(run.pk)
    other = pw.start_workflow("sched_echo", {}, delay="1s")  # its start proves time passed
    wait_for(lambda: WorkflowRun.objects.get(pk=other.pk).status == RunStatus.COMPLETED,
             timeout=30)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and not run.steps.exists()


INLINE = {**SETTINGS, "EXECUTOR": "inline"}


@pytest.fixture
def scheduler_process(rq_settings):
    """``manage.py pikku_scheduler`` of an inline deployment (no RQ worker at all)."""
    pool = Workers(INLINE)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "pikku_scheduler", "--interval", "0.2",
         "--sweep-interval", "1"],
        env=pool.env(), cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=pool.log)
    pool.procs.append(proc)
    yield pool
    pool.close()


def test_pikku_scheduler_starts_an_inline_deployments_delayed_runs_and_ticks(
        scheduler_process):
    with override_settings(PIKKU_WORKFLOWS=INLINE):
        run = pw.start_workflow("sched_echo", {"n": 3}, delay="1s")
    assert run.status == RunStatus.SCHEDULED and run.inline
    WorkflowSchedule.objects.create(
        name="every_second", workflow="sched_echo", every=1, input={"tick": True},
        source="admin", next_fire_at=timezone.now() + timedelta(seconds=1))
    try:
        wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED,
                 timeout=30)
        wait_for(lambda: WorkflowRun.objects.filter(
            schedule__name="every_second", status=RunStatus.COMPLETED).count() >= 3,
            timeout=30)
    except AssertionError:
        raise AssertionError(scheduler_process.output()[-3000:]) from None
    ticks = WorkflowSchedule.objects.get(name="every_second").ticks.filter(
        run__status=RunStatus.COMPLETED)
    for tick in ticks:
        assert tick.run.inline and tick.run.scheduled_at == tick.tick_at
        assert tick.run.output["scheduled_at"] == tick.tick_at.isoformat()
