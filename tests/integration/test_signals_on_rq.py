"""Django signals on the rq executor (jobs drained in this process, like
``pikku_worker --burst``): once per transition, after commit. The inline cases are in
tests/unit/test_signals.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.registry import registry
from pikku_workflows.runtime.recovery import sweep
from pikku_workflows.testing import drain_queues, fake_clock
from tests.unit import test_signals
from tests.unit.test_signals import _only_run

events = test_signals.events  # the fixture

# Signals go out on commit: the test database must really commit.
pytestmark = pytest.mark.django_db(transaction=True)


def test_rq_runs_send_each_signal_once(events, rq_executor):
    run = pw.start_workflow("ten_steps", {})
    assert events.names() == ["run_started"]  # created; its pass waits in the queue
    drain_queues()
    run.refresh_from_db()
    assert run.status == "completed"
    assert events.names()[0] == "run_started"
    _only_run(events, "run_started", run)
    assert _only_run(events, "run_completed", run)["output"] == 45
    succeeded = events.named("step_succeeded")
    assert sorted(e["step"] for e in succeeded) == sorted(f"Step {i}" for i in range(10))
    queued = [e for e in succeeded if e["function"] == "q_record"]
    assert len(queued) == 5
    for event in queued:  # sent through Redis: it waited in a queue
        assert event["scheduled_at"] is not None
        assert event["scheduled_at"] <= event["started_at"] <= event["finished_at"]
    assert all(e["scheduled_at"] is None for e in succeeded if e["function"] == "echo")


def test_rq_queued_retries_and_terminal_failure(events, rq_executor):
    with registry.isolated():
        @pw.function(name="sig_q_fails", queued=True, retries=2, retry_delay=0)
        def sig_q_fails(data, ctx):
            raise ValueError(f"attempt {ctx.attempt} failed")

        @pw.workflow(name="sig_q_failing")
        def sig_q_failing(wf, data):
            return wf.do("Remote", "sig_q_fails", data)

        run = pw.start_workflow("sig_q_failing", {})
        drain_queues()
    run.refresh_from_db()
    assert run.status == "failed"
    assert [(e["step"], e["attempt"]) for e in events.named("step_retried")] == [
        ("Remote", 1), ("Remote", 2)]
    failed = events.named("step_failed")
    assert [(e["attempt"], e["error"]["message"]) for e in failed] == [(3, "attempt 3 failed")]
    assert failed[0]["function"] == "sig_q_fails"
    assert _only_run(events, "run_failed", run)["workflow"] == "sig_q_failing"


def test_rq_retry_delays_driven_by_the_fake_clock(events, rq_executor):
    with registry.isolated():
        @pw.function(name="sig_flaky_once", retries=3, retry_delay="30s")
        def sig_flaky_once(data, ctx):
            if ctx.attempt == 1:
                raise ConnectionError("flaky")
            return ctx.attempt

        @pw.workflow(name="sig_delayed")
        def sig_delayed(wf, data):
            return wf.do("Flaky", "sig_flaky_once", data)

        # In the future, so that RQ's own scheduler (real time) never delivers the wake-up:
        # the clock moving and the recovery sweep do.
        with fake_clock(timezone.now() + timedelta(days=1)) as clock:
            run = pw.start_workflow("sig_delayed", {})
            drain_queues()
            retried = events.named("step_retried")
            assert [(e["attempt"], e["wake_at"] - e["finished_at"]) for e in retried] == [
                (1, timedelta(seconds=30))]
            assert events.count("run_completed") == 0
            clock.advance("40s")
            sweep()
            drain_queues()
    run.refresh_from_db()
    assert run.status == "completed" and run.output == 2
    assert events.count("step_retried") == 1
    assert [e["attempt"] for e in events.named("step_succeeded")] == [2]
    _only_run(events, "run_completed", run)


def test_rq_start_in_a_rolled_back_transaction_sends_nothing(events, rq_executor):
    with pytest.raises(RuntimeError), transaction.atomic():
        pw.start_workflow("ten_steps", {})
        raise RuntimeError("rolled back")
    assert drain_queues() == 0
    assert events == []


def test_rq_cancel_sends_run_cancelled_once(events, rq_executor):
    run = pw.start_workflow("naps", {"nap": "1h"})
    drain_queues()
    pw.cancel_run(run.pk, reason="stop")
    drain_queues()
    assert _only_run(events, "run_cancelled", run)["error"]["message"] == "stop"
    assert events.count("run_completed") == 0
