"""A pass's unit of work: what it holds back, when that is written, and by whom."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from pikku_workflows.engine import limits, store
from pikku_workflows.models import StepAttempt, WorkflowLimitSlot, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus

pytestmark = pytest.mark.django_db(transaction=True)


def leased_run(owner: str = "pass") -> WorkflowRun:
    return WorkflowRun.objects.create(
        workflow="uow", input={}, status=RunStatus.RUNNING, lease_owner=owner,
        lease_expires_at=timezone.now() + timezone.timedelta(seconds=30))


def begun(work: store.UnitOfWork, name: str) -> tuple[WorkflowStep, StepAttempt]:
    step = store.new_step(work.run_id, name, rpc_name="fn", retries=0, retry_delay="0")
    return step, work.begin_attempt(step)


def status_in_db(step: WorkflowStep) -> str:
    return WorkflowStep.objects.values_list("status", flat=True).get(pk=step.pk)


def test_a_held_success_is_written_by_the_passs_next_write() -> None:
    run = leased_run()
    work = store.UnitOfWork(run.pk, "pass")
    first, attempt = begun(work, "first")
    store.record_success(first, attempt, {"n": 1}, work=work, defer=True)
    assert work.pending
    assert status_in_db(first) == StepStatus.RUNNING  # held, not written yet
    assert not StepAttempt.objects.filter(step=first).exists()
    second, _ = begun(work, "second")  # the checkpoint writes it with the next start
    assert not work.pending
    assert status_in_db(first) == StepStatus.SUCCEEDED
    assert list(StepAttempt.objects.filter(step=first).values_list("status", "result")) == [
        (StepStatus.SUCCEEDED, {"n": 1})]
    assert status_in_db(second) == StepStatus.RUNNING


def test_every_write_given_the_unit_flushes_it_first() -> None:
    run = leased_run()
    work = store.UnitOfWork(run.pk, "pass")
    first, attempt = begun(work, "first")
    store.record_success(first, attempt, 1, work=work, defer=True)
    store.merge_state_key(run.pk, "k", "v", work)
    assert status_in_db(first) == StepStatus.SUCCEEDED and not work.pending


def test_a_write_without_the_unit_leaves_what_it_holds() -> None:
    """Another pass in the same thread (an inline child run's) has a unit of its own: its
    writes do not write this pass's held outcome; this pass's next write does."""
    outer_run, inner_run = leased_run("outer"), leased_run("inner")
    outer = store.UnitOfWork(outer_run.pk, "outer")
    inner = store.UnitOfWork(inner_run.pk, "inner")
    held, attempt = begun(outer, "held")
    store.record_success(held, attempt, "x", work=outer, defer=True)
    begun(inner, "inner-step")
    assert inner.finish_run(RunStatus.COMPLETED, output=None)
    assert status_in_db(held) == StepStatus.RUNNING
    outer.flush()
    assert status_in_db(held) == StepStatus.SUCCEEDED


def test_the_passs_end_writes_what_it_holds_in_the_same_statement() -> None:
    run = leased_run()
    work = store.UnitOfWork(run.pk, "pass")
    step, attempt = begun(work, "only")
    store.record_success(step, attempt, 7, work=work, defer=True)
    assert work.finish_run(RunStatus.COMPLETED, output=7)
    assert status_in_db(step) == StepStatus.SUCCEEDED
    run.refresh_from_db()
    assert (run.status, run.output, run.lease_owner) == (RunStatus.COMPLETED, 7, "")


def test_a_run_finished_elsewhere_is_not_finished_again_but_its_outcomes_are_kept() -> None:
    run = leased_run()
    work = store.UnitOfWork(run.pk, "pass")
    step, attempt = begun(work, "only")
    store.record_success(step, attempt, 7, work=work, defer=True)
    assert store.set_run_status(run.pk, RunStatus.CANCELLED, expected=(RunStatus.RUNNING,))
    assert not work.finish_run(RunStatus.COMPLETED, output=7)
    assert status_in_db(step) == StepStatus.SUCCEEDED  # the step did run
    assert WorkflowRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_a_fan_outs_steps_go_in_together_at_the_end_of_its_block() -> None:
    run = leased_run()
    work = store.UnitOfWork(run.pk, "pass")
    with work.collecting_inserts():
        for name in ("a", "b", "c"):
            work.save_new_step(store.new_step(run.pk, name, rpc_name="fn"))
        with work.collecting_inserts():  # nested: the outermost block inserts
            work.save_new_step(store.new_step(run.pk, "d", rpc_name="fn"))
        assert not WorkflowStep.objects.filter(run=run).exists()
    assert sorted(WorkflowStep.objects.filter(run=run).values_list("step_name", flat=True)) == [
        "a", "b", "c", "d"]


def test_a_lost_lease_stops_the_pass_at_its_next_checked_start() -> None:
    run = leased_run()
    work = store.UnitOfWork(run.pk, "not-the-owner")
    step = store.new_step(run.pk, "s", rpc_name="fn")
    with pytest.raises(store.PassAborted):
        work.begin_attempt(step)
    assert not WorkflowStep.objects.filter(run=run).exists()


# --- step limits' slots held by the unit --------------------------------------------------


LIMITED = {"LIMITS": {"uow_api": {"concurrency": 1}}}


def _taken(name: str = "uow_api") -> list[str]:
    """The holders of the limit's concurrency slots whose lease runs."""
    return list(WorkflowLimitSlot.objects.filter(
        name=name, kind="c", until__gt=timezone.now()).values_list("holder", flat=True))


def _holding(work: store.UnitOfWork, given: list[list[tuple[str, int, str]]]
             ) -> tuple[str, int, str]:
    """An ended attempt's slot, held by ``work``; its give-backs are noted in ``given``."""
    held = limits.acquire(("uow_api",))
    assert isinstance(held, limits.Held)
    (slot,) = held.slots

    def give_back(slots: list[tuple[str, int, str]]) -> None:
        given.append(list(slots))
        limits.give_back(slots)

    work.defer_give_back(held.slots, give_back)
    return slot


def test_slots_given_back_in_a_transaction_that_rolls_back_stay_held() -> None:
    with override_settings(PIKKU_WORKFLOWS=LIMITED):
        work = store.UnitOfWork(leased_run().pk, "pass")
        given: list[list[tuple[str, int, str]]] = []
        slot = _holding(work, given)
        with pytest.raises(RuntimeError), transaction.atomic():
            work.give_back_slots()  # the write that would have given it back failed
            raise RuntimeError
        assert given == [] and _taken() == [slot[2]]
        assert work.passed_slot("uow_api") == slot[1:]  # the unit holds it still
        work.flush()  # its next write gives it back, once
        assert given == [[slot]] and _taken() == []
        work.flush()
        assert given == [[slot]]


def test_a_pass_aborted_inside_its_checkpoint_still_gives_its_slot_back() -> None:
    # A retry's start (one transaction: the held writes, the lease check) finds the run
    # cancelled: the transaction rolls back, and the slot goes back with the pass's end.
    with override_settings(PIKKU_WORKFLOWS=LIMITED):
        run = leased_run()
        step = store.new_step(run.pk, "s", rpc_name="fn", retries=1, retry_delay="0")
        step.save()
        work = store.UnitOfWork(run.pk, "not-the-owner")
        given: list[list[tuple[str, int, str]]] = []
        slot = _holding(work, given)
        with pytest.raises(store.PassAborted):
            work.begin_attempt(step)
        assert given == [] and _taken() == [slot[2]]
        work.release_lease()
        assert given == [[slot]] and _taken() == []


def test_slots_given_back_in_a_committed_transaction_go_back_once_after_it() -> None:
    with override_settings(PIKKU_WORKFLOWS=LIMITED):
        work = store.UnitOfWork(leased_run().pk, "pass")
        given: list[list[tuple[str, int, str]]] = []
        slot = _holding(work, given)
        with transaction.atomic():
            work.give_back_slots()
            work.give_back_slots()
            assert work.passed_slot("uow_api") is None  # on its way back: not handed over
            assert given == []
        assert given == [[slot]] and _taken() == []
        work.flush()
        assert given == [[slot]]


def test_a_step_row_another_process_inserted_first_keeps_the_outcomes_held_before_it() -> None:
    """ensure_step's insert of a row another process wrote first fails on its unique key:
    that must not undo the held outcomes it flushed in the same write (they were lost, and
    their step ran again on the next replay)."""
    run = leased_run()
    work = store.UnitOfWork(run.pk, "pass")
    first, attempt = begun(work, "first")
    store.record_success(first, attempt, {"n": 1}, work=work, defer=True)
    WorkflowStep.objects.create(run=run, step_name="wait", status=StepStatus.SUSPENDED)
    snapshot = {"first": first}  # read before the other process's insert
    theirs = work.ensure_step(snapshot, "wait", status=StepStatus.SUSPENDED)
    assert theirs.pk == WorkflowStep.objects.get(run=run, step_name="wait").pk
    assert not work.pending
    assert status_in_db(first) == StepStatus.SUCCEEDED
    assert StepAttempt.objects.filter(step=first, status=StepStatus.SUCCEEDED).exists()
