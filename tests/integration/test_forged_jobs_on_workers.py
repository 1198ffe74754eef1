"""Forged queue messages through a real ``pikku_worker --burst``: every queue gets foreign
jobs and pikku jobs with forged payloads; the worker runs none of them. The same jobs
called in-process are in tests/unit/security/test_forged_jobs.py."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.executors.rq import (
    DRAIN_STEPS,
    ORCHESTRATE,
    RUN_STEP,
    WAKE_DUE,
    all_queue_names,
    get_queue,
)
from pikku_workflows.models import WorkflowRun
from tests.security import conftest as security
from tests.security.test_forged_jobs import UNKNOWN, first_pass_here
from tests.testapp.models import Ledger

unchanged = security.unchanged  # the fixture


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_worker_refuses_forged_jobs_on_every_queue(workers, redis_conn, unchanged,
                                                     tmp_path):
    """Every queue a worker serves gets foreign jobs (JSON, as pikku sends them, and
    pickled, as RQ would by default) and pikku jobs with forged payloads; the worker runs
    none of them, changes nothing, and still runs the real work queued after them."""
    from rq import Queue

    sleeping = first_pass_here(pw.start_workflow("sleeps_a_week", {}, inline=False))
    queued = first_pass_here(pw.start_workflow("one_queued", "q", inline=False))
    done = pw.start_workflow("sequential", {"x": 1}, inline=True)
    for queue_name in all_queue_names():
        get_queue(queue_name).empty()
    check = unchanged()
    marks = []
    sent = []
    for queue_name in all_queue_names():
        queue = get_queue(queue_name)
        for func in ("tests.security.targets.leave_mark", "os.system"):
            mark = tmp_path / f"{queue_name}-{func}"
            marks.append(mark)
            argument = str(mark) if func.endswith("leave_mark") else f"touch {mark}"
            sent.append((queue.enqueue(func, argument, result_ttl=60), "refused"))
        pickled = tmp_path / f"{queue_name}-pickled"
        marks.append(pickled)
        Queue(queue_name, connection=redis_conn).enqueue(
            "tests.security.targets.leave_mark", str(pickled), result_ttl=60)
        sent += [
            (queue.enqueue(ORCHESTRATE, UNKNOWN, result_ttl=60), "missing"),
            (queue.enqueue(ORCHESTRATE, str(done.pk), result_ttl=60), "completed"),
            (queue.enqueue(RUN_STEP, str(sleeping.pk), "A week", None, result_ttl=60),
             "not-a-function-step"),
            (queue.enqueue(RUN_STEP, str(queued.pk), "Only", "q_slow_charge",
                           result_ttl=60), "mismatch"),
            (queue.enqueue(RUN_STEP, str(done.pk), "Add", "add", result_ttl=60),
             "run-completed"),
            (queue.enqueue(DRAIN_STEPS, str(queued.pk), "q_record", result_ttl=60), "empty"),
            (queue.enqueue(WAKE_DUE, "no-such-queue", result_ttl=60), "0 woken"),
        ]
    workers.run("pikku_worker", "--burst")
    for job, expected in sent:
        job.refresh()
        if expected == "refused":
            assert job.get_status() == "failed", job.func_name
        else:
            assert job.get_status() == "finished", (job.func_name, job.args)
            assert job.return_value() == expected, (job.func_name, job.args)
    assert not [mark for mark in marks if mark.exists()]
    check()
    assert Ledger.objects.count() == 0
    # The worker survived them all: the run's real step job still runs.
    get_queue("pikku-workflow-step-worker").enqueue(RUN_STEP, str(queued.pk), "Only",
                                                    "q_record", result_ttl=0)
    workers.run("pikku_worker", "--burst")
    assert WorkflowRun.objects.get(pk=queued.pk).status == "completed"
    assert Ledger.objects.count() == 1
