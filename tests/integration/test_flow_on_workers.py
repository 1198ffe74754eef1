"""Flow control on real ``pikku_worker`` processes (DESIGN 8.4): a holder's end on a
worker starts the next run of its key; a sleeping run past its deadline is failed by a
worker's time keeper (its wake-up an hour away); a debounce window ends on a worker with
the last input; a Redis flush loses no queued run."""

from __future__ import annotations

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus
from tests.services import wait_for


def status_of(run):
    return WorkflowRun.objects.get(pk=run.pk).status


def test_a_holder_s_end_on_a_worker_starts_the_next_run_of_its_key(workers, redis_conn):
    workers.start(1)
    first = pw.start_workflow("flow_per_customer", {"customer": "w", "n": 1}, inline=False)
    second = pw.start_workflow("flow_per_customer", {"customer": "w", "n": 2}, inline=False)
    wait_for(lambda: status_of(first) == RunStatus.SUSPENDED, timeout=30)
    assert status_of(second) == RunStatus.SCHEDULED
    redis_conn.flushdb()  # a queued run lives in the database, not in Redis
    pw.resume_run(first.pk)
    wait_for(lambda: status_of(second) == RunStatus.SUSPENDED, timeout=30)
    assert status_of(first) == RunStatus.COMPLETED


def test_a_sleeping_run_past_its_deadline_fails_on_a_worker(workers):
    workers.start(1)
    run = pw.start_workflow("flow_sleeps", 3600, run_timeout="2s", inline=False)
    wait_for(lambda: status_of(run) == RunStatus.FAILED, timeout=30)
    run.refresh_from_db()
    assert run.error["code"] == "DEADLINE_EXCEEDED"
    assert "while waiting" in run.error["message"]
    assert not run.steps.filter(step_name="After").exists()


def test_a_debounce_window_ends_on_a_worker_with_the_last_input(workers):
    workers.start(1)
    runs = {pw.start_workflow("flow_echo", n, debounce=pw.Debounce("wk", "1s"),
                              inline=False).pk for n in range(5)}
    assert len(runs) == 1
    run = WorkflowRun.objects.get(pk=runs.pop())
    wait_for(lambda: status_of(run) == RunStatus.COMPLETED, timeout=30)
    run.refresh_from_db()
    assert run.output == 4
