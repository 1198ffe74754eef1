"""Every attempt's timestamps are in lifecycle order, on every path that writes attempt
rows (inline, retried, failed, atomic, child-run, queued on a step worker, run eagerly
by a worker's pass, lost with a pass), and under the fake clock they all come from it.

Before issue 22 (defect 7), ``created_at`` was ``auto_now_add``: Django's time at the
insert, later than ``running_at`` and ``failed_at`` (an in-pass attempt's row is written
with its outcome), and never the fake clock's.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.engine.dispatch import all_queue_names, serving
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.runtime import step_worker
from pikku_workflows.runtime.orchestrator import drive_queued, run_pass
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.testing import FakeClock, fake_clock
from tests.attempts import STAMPS, attempt_order_problems

pytestmark = pytest.mark.django_db

IN_PASS_ATTEMPTS = {
    "Flaky": 3, "Add": 1, "Declined": 2, "Declined:onError": 1, "Atomic": 2, "Left": 1,
    "Right": 2, "Child": 1,
}
QUEUED_ATTEMPTS = {"Queued": 2, "Queued A": 2, "Queued B": 1}


def check_run(run: WorkflowRun, expected: dict[str, int]) -> None:
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, run.error
    counts = dict(WorkflowStep.objects.filter(run=run, attempt_count__gt=0)
                  .values_list("step_name", "attempt_count"))
    assert counts == expected
    assert StepAttempt.objects.filter(step__run=run).count() == sum(expected.values())
    assert attempt_order_problems() == []


def stamps_outside(start: datetime, clock: FakeClock) -> list[str]:
    """The attempt timestamps that did not come from the fake clock (outside its span)."""
    return [f"{row['step__step_name']} #{row['attempt']} {name} {row[name]}"
            for row in StepAttempt.objects.values("step__step_name", "attempt", *STAMPS)
            for name in STAMPS
            if row[name] is not None and not start <= row[name] <= clock.now()]


def test_inline_attempts_are_in_order_on_the_real_clock():
    check_run(pw.start_workflow("every_kind_of_attempt", {"nap": "10ms"}, inline=True),
              IN_PASS_ATTEMPTS)


def test_inline_attempts_take_their_times_from_the_fake_clock():
    start = timezone.now() - timedelta(days=1)
    with fake_clock(start) as clock:
        run = pw.start_workflow("every_kind_of_attempt", {}, inline=True)
    check_run(run, IN_PASS_ATTEMPTS)
    assert stamps_outside(start, clock) == []


def drive_on_workers(run: WorkflowRun, clock: FakeClock, *, eager: bool) -> None:
    """Do in this process what workers would: passes, queued steps, wake-ups (the jobs
    sent on commit never leave the test's transaction)."""
    for _ in range(50):
        if not WorkflowRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists():
            return
        for step in WorkflowStep.objects.filter(
                run__status=RunStatus.RUNNING, rpc_name="ts_queued_flaky",
                status__in=(StepStatus.PENDING, StepStatus.SCHEDULED)):
            step_worker.run_queued_step(str(step.run_id), step.step_name, "ts_queued_flaky")
        for pk in WorkflowRun.objects.filter(status=RunStatus.RUNNING).values_list(
                "pk", flat=True):
            with serving(all_queue_names() if eager else []):
                drive_queued(pk)
        clock.advance("1h")
    raise AssertionError("the run did not end")


@pytest.mark.parametrize("eager", [False, True], ids=["step-workers", "eager"])
def test_attempts_on_workers_are_in_order_and_on_the_fake_clock(eager):
    start = timezone.now() - timedelta(days=1)
    settings = {"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0, "EAGER_QUEUED_STEPS": eager}
    with override_settings(PIKKU_WORKFLOWS=settings), fake_clock(start) as clock:
        run = pw.start_workflow("every_kind_of_attempt", {"queued": True}, inline=False)
        drive_on_workers(run, clock, eager=eager)
    check_run(run, {**IN_PASS_ATTEMPTS, **QUEUED_ATTEMPTS})
    assert stamps_outside(start, clock) == []
    if not eager:
        # The retries went through a step worker's claim of a scheduled step.
        assert StepAttempt.objects.filter(step__run=run, scheduled_at__isnull=False).exists()


def test_the_attempt_of_a_pass_that_died_mid_step_is_in_order():
    """A step an in-pass attempt left running (its attempt row never written) gets a
    failed attempt row of its own, created when it started running."""
    with registry.isolated(), override_settings(PIKKU_WORKFLOWS={"EXECUTOR": "rq"}):
        @pw.workflow(name="ts_dies_mid_step")
        def dies_mid_step(wf, data):
            return wf.do("Work", "echo", 1, retries=1, retry_delay=0)

        run = pw.start_workflow("ts_dies_mid_step", {}, inline=False)  # its job never leaves
        WorkflowStep.objects.create(run=run, step_name="Work", rpc_name="echo", data=1,
                                    status=StepStatus.RUNNING, attempt_count=1, retries=1)
        assert run_pass(run.pk).kind == "completed"
    assert list(StepAttempt.objects.filter(step__run=run).order_by("attempt")
                .values_list("status", "error__type")) == [("failed", "WorkerLost"),
                                                           ("succeeded", None)]
    assert attempt_order_problems() == []
