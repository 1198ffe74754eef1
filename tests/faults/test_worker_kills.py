"""SIGKILL and SIGTERM of workers under load: every run completes, every effect once."""

from __future__ import annotations

import json
import os
import random
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


def orphans(parent_ids: list) -> list[str]:
    """Runs of these families that broke the rule: a live child of a finished run, a
    child step still open in a finished run."""
    finished = RunStatus.terminal()
    live = WorkflowRun.objects.filter(parent_run__in=parent_ids,
                                      status__in=(RunStatus.RUNNING, RunStatus.SUSPENDED),
                                      parent_run__status__in=finished)
    open_steps = WorkflowStep.objects.filter(
        run__in=parent_ids, run__status__in=finished, child_run__isnull=False,
        status__in=(StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.RUNNING))
    return ([f"live child {pk} of a finished run" for pk in live.values_list("pk", flat=True)]
            + [f"open child step {pk}" for pk in open_steps.values_list("pk", flat=True)])


def test_sigkills_never_leave_a_finished_parent_with_a_live_child(workers):
    rng = random.Random(23)
    workers.start(2)
    parents = [pw.start_workflow("fault_family", {"key": f"family-{i}", "catch": i % 2 == 0},
                                 inline=False).pk for i in range(30)]
    kills = 0
    deadline = time.monotonic() + 30
    while unfinished(parents) and time.monotonic() < deadline:
        time.sleep(0.7)
        victims = [p for p in workers.procs if p.poll() is None]
        workers.kill(rng.choice(victims), signal.SIGKILL)
        workers.start(1)
        kills += 1
    workers.run("pikku_recover")
    try:
        wait_for(lambda: unfinished(parents) == 0 and not orphans(parents), timeout=90)
    except AssertionError:
        raise AssertionError(describe_unfinished(parents) + "; ".join(orphans(parents))
                             + workers.output()[-3000:]) from None
    assert kills >= 2
    families = WorkflowRun.objects.filter(pk__in=parents)
    assert set(families.values_list("status", flat=True)) <= {"failed", "completed"}
    children = WorkflowRun.objects.filter(parent_run__in=parents)
    assert children.count() == len(parents)
    assert set(children.values_list("status", flat=True)) == {"cancelled"}
