"""Django signals: once per transition, after commit, inline (on the rq executor:
tests/integration/test_signals_on_rq.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.dispatch import Signal
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import signals
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import fake_clock

# Signals go out on commit: the test database must really commit.
pytestmark = pytest.mark.django_db(transaction=True)

SIGNALS = {
    "run_started": signals.run_started, "run_completed": signals.run_completed,
    "run_failed": signals.run_failed, "run_suspended": signals.run_suspended,
    "run_cancelled": signals.run_cancelled, "step_succeeded": signals.step_succeeded,
    "step_failed": signals.step_failed, "step_retried": signals.step_retried,
    "run_failure_alert": signals.run_failure_alert,  # with ALERTS only (test_alerts.py)
    "job_started": signals.job_started,
}


class Events(list):
    """Every signal received, as ``(name, kwargs)``, in order."""

    def named(self, name: str) -> list[dict]:
        return [kwargs for got, kwargs in self if got == name]

    def names(self) -> list[str]:
        return [name for name, _ in self]

    def count(self, name: str) -> int:  # type: ignore[override]
        return len(self.named(name))


@pytest.fixture
def events():
    got = Events()
    receivers = []
    for name, signal in SIGNALS.items():
        def receiver(signal, sender, _name=name, **kwargs):
            assert sender is WorkflowRun
            got.append((_name, kwargs))
        signal.connect(receiver, weak=False, dispatch_uid=f"test-{name}")
        receivers.append((signal, name))
    yield got
    for signal, name in receivers:
        signal.disconnect(dispatch_uid=f"test-{name}")


def test_every_signal_is_exported_and_documented():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    glance = (root / "docs" / "python-api.md").read_text()
    page = (root / "docs" / "signals.md").read_text()
    exported = {name for name in pw.__all__ if isinstance(getattr(pw, name), Signal)}
    assert exported == set(SIGNALS) == set(signals.__all__)
    for name in exported:
        assert getattr(pw, name) is SIGNALS[name]
        assert f"`pw.{name}`" in glance and f"| `{name}` |" in page


def _only_run(events: Events, name: str, run) -> dict:
    got = events.named(name)
    assert len(got) == 1, (name, events.names())
    assert got[0]["run"] == run.pk
    return got[0]


# --- inline -------------------------------------------------------------------------------


def test_a_completed_run_sends_started_then_steps_then_completed(events):
    run = pw.start_workflow("sequential", {"x": 2}, inline=True)
    assert run.status == "completed"
    assert events.names() == ["run_started", "step_succeeded", "step_succeeded",
                              "run_completed"]
    started = _only_run(events, "run_started", run)
    assert started["workflow"] == "sequential"
    completed = _only_run(events, "run_completed", run)
    assert completed == {"run": run.pk, "workflow": "sequential", "output": run.output}
    add, double = events.named("step_succeeded")
    assert (add["step"], add["function"], add["attempt"]) == ("Add", "add", 1)
    assert (double["step"], double["function"]) == ("Double", "double")
    assert add["run"] == run.pk and add["scheduled_at"] is None
    assert add["started_at"] <= add["finished_at"] <= double["started_at"]
    assert add["step_id"] == run.steps.get(step_name="Add").pk


def test_nothing_is_sent_before_the_commit_and_nothing_for_a_rollback(events):
    with transaction.atomic():
        run = pw.start_workflow("sequential", {"x": 1}, inline=True)
        assert run.status == "completed"
        assert events == []  # not committed yet
    assert events.names() == ["run_started", "step_succeeded", "step_succeeded",
                              "run_completed"]
    events.clear()

    with pytest.raises(RuntimeError), transaction.atomic():
        pw.start_workflow("sequential", {"x": 1}, inline=True)
        pw.start_workflow("compensated", {"order": 1}, inline=True)
        raise RuntimeError("the caller's transaction rolls back")
    assert events == []
    assert WorkflowRun.objects.count() == 1


def test_retries_with_the_fake_clock_send_step_retried_then_succeeded(events):
    with override_settings(PIKKU_WORKFLOWS={"DEFAULT_RETRY_DELAY": "5s"}), \
            fake_clock() as clock:
        begin = clock.now()
        run = pw.start_workflow("retrying", {"fail_times": 2, "retries": 3}, inline=True)
    assert run.status == "completed"
    retried = events.named("step_retried")
    assert [r["attempt"] for r in retried] == [1, 2]
    for number, retry in enumerate(retried, start=1):
        assert retry["step"] == "Flaky" and retry["function"] == "flaky"
        assert retry["error"] == {"message": f"transient failure on attempt {number}",
                                  "type": "ConnectionError"}
        assert retry["wake_at"] == retry["finished_at"] + timedelta(seconds=5)
    assert retried[0]["finished_at"] == begin  # the fake clock had not moved yet
    assert retried[1]["started_at"] == begin + timedelta(seconds=5)
    succeeded = events.named("step_succeeded")
    assert [(s["step"], s["attempt"]) for s in succeeded] == [("Flaky", 3)]
    assert events.count("step_failed") == 0 and events.count("run_failed") == 0
    _only_run(events, "run_completed", run)


def test_an_exhausted_step_sends_step_failed_once_and_the_run_failed(events):
    run = pw.start_workflow("compensated", {"order": 7, "retries": 1}, inline=True)
    assert run.status == "failed"
    assert [(e["step"], e["attempt"]) for e in events.named("step_retried")] == [("Charge", 1)]
    failed = events.named("step_failed")
    assert [(e["step"], e["attempt"]) for e in failed] == [("Charge", 2)]
    assert failed[0]["error"]["message"] == "card declined for 7"
    assert [e["step"] for e in events.named("step_succeeded")] == ["Charge:onError"]
    got = _only_run(events, "run_failed", run)
    assert got["error"]["code"] == "STEP_FAILED" and got["error"] == run.error
    assert got["workflow"] == "compensated"
    assert events.count("run_completed") == 0


def test_a_step_with_bad_data_sends_step_failed(events):
    run = pw.start_workflow("bad_data", {}, inline=True)
    assert run.status == "failed"
    failed = events.named("step_failed")
    assert len(failed) == 1 and failed[0]["step"] == "Send object"
    assert failed[0]["error"]["fatal"] is True
    _only_run(events, "run_failed", run)


def test_suspend_resume_and_cancel(events):
    run = pw.start_workflow("two_gates", {}, inline=True)
    assert run.status == "suspended"
    got = _only_run(events, "run_suspended", run)
    assert got["error"]["message"] == "Awaiting warehouse"
    events.clear()

    pw.resume_run(run.pk, {"dock": 4})  # to the second gate
    assert events.names() == ["step_succeeded", "step_succeeded", "run_suspended"]
    assert [e["step"] for e in events.named("step_succeeded")] == [
        "__workflow_suspend:Awaiting warehouse", "Between"]  # the gate opened, then a step
    assert events.named("run_suspended")[0]["error"]["message"] == "Awaiting courier"
    events.clear()

    pw.cancel_run(run.pk, reason="customer left")
    got = _only_run(events, "run_cancelled", run)
    assert got == {"run": run.pk, "workflow": "two_gates",
                   "error": {"code": "WORKFLOW_CANCELLED", "message": "customer left"}}
    assert events.names() == ["run_cancelled"]  # the closed gate is no step_failed


def test_a_body_cancelling_itself_sends_run_cancelled(events):
    run = pw.start_workflow("cancels_itself", {"cancel": True}, inline=True)
    assert run.status == "cancelled"
    got = _only_run(events, "run_cancelled", run)
    assert got["error"]["message"] == "customer changed their mind"


def test_sleeps_and_approval_gates_send_step_succeeded_when_they_end(events):
    with fake_clock():
        run = pw.start_workflow("sleeps_a_week", {}, inline=True)
    assert run.status == "completed"
    steps = [(e["step"], e["function"], e["attempt"]) for e in events.named("step_succeeded")]
    assert steps == [("Before", "echo", 1), ("A week", None, 0), ("After", "echo", 1)]
    events.clear()

    run = pw.start_workflow("needs_approval", {}, inline=True)
    assert _only_run(events, "run_suspended", run)["error"]["code"] == "WAITING_FOR_APPROVAL"
    pw.approve_step(run.pk, "Manager sign-off", {"approved": True})
    gate = [e for e in events.named("step_succeeded")
            if e["step"] == "__workflow_approval:Manager sign-off"]
    assert len(gate) == 1 and gate[0]["attempt"] == 0
    _only_run(events, "run_completed", run)


def test_child_runs_send_their_own_signals(events):
    run = pw.start_workflow("parent", {"child": "child_ok"}, inline=True)
    assert run.status == "completed", run.error
    started = events.named("run_started")
    assert [e["workflow"] for e in started] == ["parent", "child_ok"]
    assert [e["workflow"] for e in events.named("run_completed")] == ["child_ok", "parent"]


def test_retry_run_sends_no_second_start(events):
    run = pw.start_workflow("compensated", {"order": 1, "retries": 0}, inline=True)
    events.clear()
    pw.retry_run(run.pk)
    assert events.count("run_started") == 0
    assert events.count("run_failed") == 1  # it fails again, once
    assert events.count("step_failed") == 1


def test_a_failing_receiver_never_disturbs_the_run(events):
    def broken(**kwargs):
        raise RuntimeError("receiver bug")

    signals.run_completed.connect(broken, weak=False, dispatch_uid="broken")
    signals.step_succeeded.connect(broken, weak=False, dispatch_uid="broken")
    try:
        run = pw.start_workflow("sequential", {"x": 1}, inline=True)
    finally:
        signals.run_completed.disconnect(dispatch_uid="broken")
        signals.step_succeeded.disconnect(dispatch_uid="broken")
    assert run.status == "completed"
    assert events.count("run_completed") == 1


def test_no_receiver_means_nothing_is_registered_on_commit():
    assert not signals.run_started.receivers
    with transaction.atomic():
        pw.start_workflow("sequential", {"x": 1}, inline=True)
        assert transaction.get_connection().run_on_commit == []
