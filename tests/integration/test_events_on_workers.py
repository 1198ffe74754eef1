"""Events, messages and timeouts on the rq executor: jobs drained in the test's process,
and real ``pikku_worker`` subprocesses (a waiting run holds no worker; a send wakes it; a
timeout survives a worker restart; losing Redis loses no wake-up)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowWait
from pikku_workflows.status import RunStatus
from pikku_workflows.testing import drain_queues
from tests.processes import ROOT
from tests.services import SETTINGS, Workers, wait_for


def status(run):
    return WorkflowRun.objects.get(pk=run.pk).status


def reload(run):
    return WorkflowRun.objects.get(pk=run.pk)


# --- the rq executor, its jobs drained here ------------------------------------------------


def test_a_send_enqueues_the_woken_runs_pass_after_its_commit(rq_executor, transactional_db):
    run = pw.start_workflow("ev_wait", {"order": "rq-1"})
    drain_queues()
    assert status(run) == RunStatus.SUSPENDED
    assert pw.send_event("payment.succeeded", "paid", key="rq-1").woken == 1
    assert status(run) == RunStatus.RUNNING  # its pass is a job now, not a call
    drain_queues()
    assert reload(run).output == "paid"


def test_messages_and_a_graph_wait_on_the_rq_executor(rq_executor, transactional_db):
    receiver = pw.start_workflow("ev_recv", {"count": 2})
    graph = pw.start_workflow("ev_graph", {"order": "g-1"})
    drain_queues()
    assert {status(receiver), status(graph)} == {RunStatus.SUSPENDED}
    pw.send(receiver.pk, 1)
    pw.send(receiver.pk, 2)
    pw.send_event("payment.succeeded", "ok", key="g-1")
    drain_queues()
    assert reload(receiver).output == [1, 2]
    assert reload(graph).output == {"paid": "ok"}


# --- real workers ----------------------------------------------------------------------------


def test_waiting_runs_hold_no_worker_and_a_send_wakes_each(workers):
    workers.start(1)
    waiting = [pw.start_workflow("ev_wait", {"order": f"w-{n}"}) for n in range(3)]
    wait_for(lambda: all(status(r) == RunStatus.SUSPENDED for r in waiting), timeout=30)
    # The one worker is free: another run completes while the three wait.
    other = pw.start_workflow("ev_recv", {"count": 1})
    wait_for(lambda: status(other) == RunStatus.SUSPENDED, timeout=30)
    pw.send(other.pk, "hi")
    wait_for(lambda: status(other) == RunStatus.COMPLETED, timeout=30)
    for n in range(len(waiting)):
        assert pw.send_event("payment.succeeded", n, key=f"w-{n}").woken == 1
    wait_for(lambda: all(status(r) == RunStatus.COMPLETED for r in waiting), timeout=30)
    assert [reload(r).output for r in waiting] == [0, 1, 2]


def test_a_timeout_survives_a_worker_restart(workers):
    workers.start(1)
    run = pw.start_workflow("ev_wait", {"order": "restart", "timeout": "3s"})
    wait_for(lambda: status(run) == RunStatus.SUSPENDED, timeout=30)
    workers.stop_all()
    time.sleep(3.5)  # the timeout passes while no worker runs (real processes, real time)
    assert status(run) == RunStatus.SUSPENDED
    workers.start(1)
    wait_for(lambda: status(run) == RunStatus.COMPLETED, timeout=30)
    assert reload(run).output is None
    assert WorkflowWait.objects.get(run=run).outcome == "timed_out"


@pytest.mark.parametrize("kind", ["event", "message"])
def test_losing_redis_loses_no_wake_up(workers, redis_conn, kind):
    workers.start(1)
    run = pw.start_workflow("ev_wait" if kind == "event" else "ev_recv", {"order": "flush"})
    wait_for(lambda: status(run) == RunStatus.SUSPENDED, timeout=30)
    workers.stop_all()
    if kind == "event":
        pw.send_event("payment.succeeded", "kept", key="flush")
    else:
        pw.send(run.pk, "kept")
    redis_conn.flushdb()  # the wake-up job is gone: only the database knows
    workers.start(1)
    wait_for(lambda: status(run) == RunStatus.COMPLETED, timeout=40)
    assert reload(run).output == ("kept" if kind == "event" else ["kept"])


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


def test_pikku_scheduler_ends_an_inline_runs_wait_at_its_timeout(scheduler_process):
    with override_settings(PIKKU_WORKFLOWS=INLINE):
        run = pw.start_workflow("ev_wait", {"order": "inline", "timeout": "2s"})
    assert run.inline and status(run) == RunStatus.SUSPENDED
    wait_for(lambda: status(run) == RunStatus.COMPLETED, timeout=30)
    assert reload(run).output is None
    assert WorkflowWait.objects.get(run=run).outcome == "timed_out"


# --- woken runs' passes: one job for many --------------------------------------------------


def _passes(queue="pikku-workflow-orchestrator"):
    from pikku_workflows.executors.rq import connection

    return connection().lrange(f"pikku:passes:{queue}", 0, -1)


def test_woken_runs_share_one_passes_job_and_each_gets_its_pass(rq_executor, transactional_db):
    from pikku_workflows.executors.rq import RUN_PASSES, get_queue

    runs = [pw.start_workflow("ev_wait", {"order": f"many-{i}"}) for i in range(5)]
    drain_queues()
    assert {status(run) for run in runs} == {RunStatus.SUSPENDED}
    for i in range(5):
        pw.send_event("payment.succeeded", i, key=f"many-{i}")
    # Five entries, one job: a woken run sends a job only when none is on its way.
    assert [entry.split()[0] for entry in map(bytes.decode, _passes())] == \
        [str(run.pk) for run in runs]
    wake = get_queue("pikku-workflow-orchestrator.wake")
    assert [job.func_name for job in wake.jobs] == [RUN_PASSES]
    assert drain_queues() == 1
    assert [reload(run).output for run in runs] == [0, 1, 2, 3, 4]
    assert _passes() == []
    # The job freed its claim as it started: the next woken run sends a job again.
    run = pw.start_workflow("ev_wait", {"order": "later"})
    drain_queues()
    pw.send_event("payment.succeeded", "late", key="later")
    assert [job.func_name for job in wake.jobs] == [RUN_PASSES]
    drain_queues()
    assert reload(run).output == "late"


def test_a_passes_job_drops_bad_entries_and_hands_the_rest_on_after_its_time(
        rq_executor, transactional_db, monkeypatch, caplog):
    from pikku_workflows.executors import rq

    runs = [pw.start_workflow("ev_wait", {"order": f"slow-{i}"}) for i in range(3)]
    drain_queues()
    key = "pikku:passes:pikku-workflow-orchestrator"
    # Forged: not a run id, a time out of range, a run that does not exist.
    rq.connection().rpush(key, "not-a-run 1.0", f"{'1' * 32} 1e400", f"{'0' * 32} 1.0")
    for i in range(3):
        pw.send_event("payment.succeeded", i, key=f"slow-{i}")
    wake = rq.get_queue("pikku-workflow-orchestrator.wake")
    assert len(wake) == 1
    # Its time is up before its first entry: all of them go on to a new job.
    monkeypatch.setattr(rq, "PASSES_JOB_SECONDS", 0.0)
    assert rq.run_passes("pikku-workflow-orchestrator") == 0
    assert len(_passes()) == 6 and len(wake) == 2
    monkeypatch.setattr(rq, "PASSES_JOB_SECONDS", 30.0)
    assert rq.run_passes("pikku-workflow-orchestrator") == 3
    assert [reload(run).output for run in runs] == [0, 1, 2]
    assert "not a run id" in caplog.text and "does not exist" in caplog.text


def test_the_recovery_sweep_counts_woken_runs_waiting_for_their_pass_as_a_backlog(
        rq_executor, transactional_db):
    from pikku_workflows.engine.dispatch import get_executor

    run = pw.start_workflow("ev_wait", {"order": "backlog"})
    drain_queues()
    assert get_executor(False).oldest_waiting_job() is None
    pw.send_event("payment.succeeded", "x", key="backlog")
    oldest = get_executor(False).oldest_waiting_job()
    assert oldest is not None and abs((oldest - reload(run).updated_at).total_seconds()) < 5
    drain_queues()
    assert get_executor(False).oldest_waiting_job() is None
