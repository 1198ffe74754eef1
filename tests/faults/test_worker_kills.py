"""SIGKILL and SIGTERM of workers under load: every run completes, every effect once."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.services import wait_for

from .chaos import check_orders, describe_unfinished, run_chaos, start_orders, unfinished
from .models import FaultLedger


def test_random_sigkills_lose_no_run_and_double_no_effect(workers):
    report = run_chaos(workers, runs=200, workers=2, kill_every=1.5, kill_for=40,
                       settle_timeout=240)
    print(json.dumps(report.summary()))
    assert report.problems == []
    assert len(report.kills) >= 3
    # The kills struck inside steps, and recovery gave those attempts up and retried them.
    assert report.lost_attempts >= 1
    assert not WorkflowStep.objects.exclude(status=StepStatus.SUCCEEDED).exists()


def test_sigterm_lets_a_worker_finish_its_step_and_nothing_is_stuck(workers):
    [worker] = workers.start(1)
    run = pw.start_workflow("fault_order", {"key": "term", "amount": 3, "nap": "0s"},
                            inline=False)
    wait_for(lambda: WorkflowStep.objects.filter(run=run, status=StepStatus.RUNNING).exists(),
             interval=0.005)
    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    # A warm shutdown: the attempt it was running ended (no attempt left running).
    assert not StepAttempt.objects.filter(step__run=run, status="running").exists()
    workers.start(1)
    wait_for(lambda: unfinished([run.pk]) == 0, timeout=30)
    assert check_orders({run.pk: ("term", 3)}) == []
    assert not StepAttempt.objects.filter(error__type="WorkerLost").exists()


@pytest.mark.parametrize("count", [40])
def test_postgres_backends_of_workers_terminated_mid_load(workers, count):
    from django.db import connection

    workers.start(2)
    started = start_orders(count)
    deadline = time.monotonic() + 60
    terminated = 0
    while unfinished(list(started)) and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            terminated += cursor.fetchone()[0]
        time.sleep(0.7)
    assert terminated >= 2
    try:
        wait_for(lambda: unfinished(list(started)) == 0, timeout=60)
    except AssertionError:
        raise AssertionError(describe_unfinished(list(started))
                             + workers.output()[-3000:]) from None

    assert check_orders(started) == []
    assert WorkflowRun.objects.filter(pk__in=list(started),
                                      status=RunStatus.COMPLETED).count() == count
    assert FaultLedger.objects.count() == count * 4
