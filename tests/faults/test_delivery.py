"""Jobs delivered three times, and eight processes starting one idempotent run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from pikku_workflows.executors.rq import all_queue_names, get_queue
from pikku_workflows.executors.rq import connection as redis_connection
from pikku_workflows.executors.worker import PikkuWorker
from pikku_workflows.models import StepAttempt, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.services import ROOT, SETTINGS

from .chaos import check_orders, describe_unfinished, start_orders


class TripleDeliveryWorker(PikkuWorker):
    """Delivers every job three times: before running one, it enqueues two copies."""

    copies = 0

    def execute_job(self, job: Any, queue: Any) -> None:
        if not job.meta.get("copy"):
            for _ in range(2):
                queue.enqueue(job.func_name, *job.args, meta={"copy": True},
                              job_timeout=-1, result_ttl=0)
                TripleDeliveryWorker.copies += 1
        super().execute_job(job, queue)


def drain_until_finished(run_ids: list[Any], worker_class: type = PikkuWorker, *,
                         timeout: float, or_suspended: bool = False) -> None:
    """Burst workers in this process (with the scheduler's pass) until the runs end (or
    are suspended)."""
    queues = [get_queue(name) for name in all_queue_names()]
    deadline = time.monotonic() + timeout
    settled = RunStatus.terminal() | ({RunStatus.SUSPENDED} if or_suspended else set())
    while WorkflowRun.objects.filter(pk__in=run_ids).exclude(status__in=settled).exists():
        assert time.monotonic() < deadline, describe_unfinished(run_ids)
        worker = worker_class(queues, connection=redis_connection(),
                              serializer=queues[0].serializer)
        worker.work(burst=True, with_scheduler=True, logging_level="WARNING")
        time.sleep(0.05)


@pytest.mark.parametrize("eager", [True, False], ids=["eager-steps", "every-step-a-job"])
def test_every_job_delivered_three_times_commits_each_effect_once(rq_settings, eager):
    with override_settings(PIKKU_WORKFLOWS={**SETTINGS, "EAGER_QUEUED_STEPS": eager}):
        started = start_orders(10)
        TripleDeliveryWorker.copies = 0
        drain_until_finished(list(started), TripleDeliveryWorker, timeout=90)
    assert TripleDeliveryWorker.copies >= 2 * 10 * 3  # a pass, a wake-up, a child: each x3
    assert check_orders(started) == []
    # Copies found their step taken: no attempt beyond the planned ones (Charge fails
    # once for a third of the keys, by design).
    extra = StepAttempt.objects.filter(step__run__in=list(started), attempt__gt=2)
    assert not extra.exists()


def test_eight_processes_starting_one_idempotency_key_make_one_run(rq_settings):
    key = "order-7-once"
    code = (
        "import os, sys, time, django\n"
        "django.setup()\n"
        "import pikku_workflows as pw\n"
        "go = float(sys.argv[1])\n"
        "time.sleep(max(0.0, go - time.time()))\n"
        f"run = pw.start_workflow('fault_order', {{'key': 'k', 'amount': 1}}, "
        f"idempotency_key='{key}')\n"
        "print(run.pk)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "PIKKU_TEST_DB_NAME": connection.settings_dict["NAME"],
           "PIKKU_WORKFLOWS_JSON": json.dumps(SETTINGS), "PYTHONPATH": str(ROOT)}
    go = str(time.time() + 4)  # every process is loaded and waiting by then
    procs = [subprocess.Popen([sys.executable, "-c", code, go], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in outputs]
    run_ids = {out.strip() for out, _ in outputs}
    assert len(run_ids) == 1
    assert WorkflowRun.objects.filter(idempotency_key=key).count() == 1
    assert str(WorkflowRun.objects.get(idempotency_key=key).pk) in run_ids
