"""Forks on the rq executor: a run failed on a real ``pikku_worker`` is rerun from its
failed step, and the fork runs on the worker (the inline cases: tests/unit/test_forks.py)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from tests.services import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_run_is_forked_and_the_fork_runs_on_a_worker(workers, users):
    source = pw.start_workflow("fork_orders", {}, owner=users["owner"])
    assert source.inline is False
    workers.start(1)
    failed = wait_for(lambda: WorkflowRun.objects.filter(pk=source.pk, status="failed").first())
    assert failed.error["step"] == "Charge"
    recorded = list(WorkflowStep.objects.filter(run=source).order_by("id").values_list(
        "step_name", "status", "result"))

    # The fix comes as a new input here: the worker's code is the test's own.
    fork = pw.fork_run(source.pk, input={"ok": True}, reason="card fixed",
                       user=users["staff"])
    assert (fork.inline, fork.owner_id) == (False, users["owner"].pk)
    done = wait_for(lambda: WorkflowRun.objects.filter(pk=fork.pk, status="completed").first())
    assert done.output["charge"] == {"charged": True}
    steps = list(WorkflowStep.objects.filter(run=fork).order_by("id"))
    assert [s.step_name for s in steps] == ["Reserve", "Price", "Charge", "Ship"]
    assert [done.kept_step(s) for s in steps] == [True, True, False, False]
    assert [s.attempts.count() for s in steps] == [1, 1, 1, 1]
    # The source is as it was.
    assert WorkflowRun.objects.get(pk=source.pk).status == "failed"
    assert list(WorkflowStep.objects.filter(run=source).order_by("id").values_list(
        "step_name", "status", "result")) == recorded


def test_a_fork_refused_on_the_rq_executor_sends_nothing(workers, redis_conn):
    source = pw.start_workflow("fork_orders", {})
    workers.start(1)
    wait_for(lambda: WorkflowRun.objects.filter(pk=source.pk, status="failed").first())
    before = WorkflowRun.objects.count()
    with pytest.raises(pw.WorkflowForkError) as refused:
        pw.fork_run(source.pk, input={"express": True})
    assert refused.value.step_asked == "Express"
    assert WorkflowRun.objects.count() == before
