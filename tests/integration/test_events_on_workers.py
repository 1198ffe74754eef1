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
