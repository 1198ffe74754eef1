"""Named step limits (DESIGN.md §8.4): concurrency slots as leases, rates, waiting steps."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows.conf import validate_limits
from pikku_workflows.durations import parse_rate
from pikku_workflows.engine import limits
from pikku_workflows.engine.clock import clock
from pikku_workflows.exceptions import WorkflowConfigurationError, WorkflowDefinitionError
from pikku_workflows.models import (
    StepAttempt,
    WorkflowLimit,
    WorkflowLimitSlot,
    WorkflowRun,
    WorkflowStep,
)
from pikku_workflows.registry import registry
from pikku_workflows.runtime import recovery
from pikku_workflows.runtime.orchestrator import run_pass
from pikku_workflows.runtime.step_worker import run_queued_step
from pikku_workflows.status import StepStatus
from pikku_workflows.testing import fake_clock, run_inline
from tests.settings import TEST_LIMITS
from tests.unit.workflows_step_limits import OTHERS, STARTS

pytestmark = pytest.mark.django_db(transaction=True)

LIMITED = {"DEFAULT_RETRY_DELAY": 0, "LIMITS": TEST_LIMITS}
# Redis "down" (nothing listens on port 1): every job is lost; the test drives the passes.
REDIS_DOWN = {**LIMITED, "EXECUTOR": "rq", "RQ_CONNECTION": "unreachable",
              "UNDISPATCHED_AFTER": "0s", "STALLED_AFTER": "0s"}


@pytest.fixture(autouse=True)
def _fresh():
    STARTS.clear()
    OTHERS.clear()
    limits.forget_overrides()
    yield
    limits.forget_overrides()


def _fill(name: str = "test_api") -> limits.Held:
    """Take every slot of the limit, as another worker's attempts would."""
    held = limits.acquire((name,))
    assert isinstance(held, limits.Held)
    return held


# --- parsing and validation ----------------------------------------------------------------


@pytest.mark.parametrize(("text", "parsed"), [
    ("100/min", (100, 60.0)), ("20/s", (20, 1.0)), ("5 / 10s", (5, 10.0)),
    ("1/hour", (1, 3600.0)), ("3/d", (3, 86400.0)),
])
def test_rates_parse(text, parsed):
    assert parse_rate(text) == parsed


@pytest.mark.parametrize("text", ["", "100", "0/s", "-1/s", "x/min", "10/fortnight", 5,
                                  None, "10/0s"])
def test_bad_rates_are_refused(text):
    with pytest.raises(ValueError, match="invalid rate"):
        parse_rate(text)


@pytest.mark.parametrize(("value", "message"), [
    ([], "must be a dict"),
    ({"a": {"concurrency": 0}}, r"\['a'\]\['concurrency'\] is 0"),
    ({"a": {"concurrency": True}}, "must be an int >= 1"),
    ({"a": {"rate": "lots"}}, "invalid .*'lots'"),
    ({"a": {"burst": 3}}, "unknown key.*burst"),
    ({"a": 5}, "must be a dict with"),
    ({"x" * 101: {"concurrency": 1}}, "at most 100 characters"),
])
def test_bad_limits_settings_are_refused(value, message):
    with pytest.raises(WorkflowConfigurationError, match=message):
        validate_limits(value)


def test_a_function_s_limits_must_be_names():
    for bad in ("test_api", [""], [3], ["x" * 101]):
        with pytest.raises(WorkflowDefinitionError, match="limits must be a list"):
            pw.function(name=f"bad_limits_{len(str(bad))}", limits=bad)(lambda data: data)
    assert registry.function("limited_call").limits == ("test_api",)


def test_the_system_check_names_unknown_limits_and_bad_settings():
    with override_settings(PIKKU_WORKFLOWS={"LIMITS": {"test_api": {"concurrency": 0},
                                                       "other": {"rate": "fast"}}}):
        found = {(m.id, m.msg.split(":")[0]) for m in run_checks()
                 if m.id in ("pikku_workflows.E015", "pikku_workflows.E016")}
    ids = {m_id for m_id, _ in found}
    assert ids == {"pikku_workflows.E015", "pikku_workflows.E016"}
    messages = " ".join(m.msg for m in run_checks() if m.id == "pikku_workflows.E015")
    assert messages == ""  # the test settings declare every limit the test functions name
    with override_settings(PIKKU_WORKFLOWS={"LIMITS": {"test_api": {"concurrency": 1}}}):
        unknown = [m.msg for m in run_checks() if m.id == "pikku_workflows.E015"]
        invalid = [m for m in run_checks() if m.id in ("pikku_workflows.E016",
                                                       "pikku_workflows.E011")]
    assert any("'rated_call'" in msg and "'test_rate'" in msg for msg in unknown)
    assert not any("'limited_call'" in msg for msg in unknown)
    assert invalid == []


# --- concurrency -----------------------------------------------------------------------------


def test_an_in_pass_step_waits_scheduled_for_a_full_limit_then_runs():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock() as clock:
        other = _fill()
        run = pw.start_workflow("uses_limited", 7)
        assert run_pass(run.pk).kind == "paused"
        step = WorkflowStep.objects.get(run=run)
        assert (step.status, step.waiting_for_limit) == (StepStatus.SCHEDULED, "test_api")
        assert step.wake_at > clock.now()
        assert step.attempt_count == 0 and STARTS == []
        # The run holds no lease while it waits (no worker holds it).
        assert WorkflowRun.objects.get(pk=run.pk).lease_owner == ""
        limits.release(other)  # the holder ends: the waiter is due at once
        assert WorkflowStep.objects.get(run=run).wake_at <= clock.now()
        assert run_pass(run.pk).kind == "completed"
    assert WorkflowRun.objects.get(pk=run.pk).output == 7
    assert len(STARTS) == 1


def test_a_queued_step_claimed_on_a_full_limit_gives_its_claim_back():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock() as clock:
        other = _fill()
        run = pw.start_workflow("uses_limited_queued", 3)
        assert run_pass(run.pk).kind == "paused"
        assert run_queued_step(str(run.pk), "Call", "limited_queued_call") == "waiting"
        began = clock.now()
        clock.advance("5s")  # its next try finds the limit full again
        assert run_queued_step(str(run.pk), "Call", "limited_queued_call") == "waiting"
        step = WorkflowStep.objects.get(run=run)
        assert step.waiting_since == began  # the oldest wait counts from the first
        assert (step.status, step.waiting_for_limit, step.attempt_count) == (
            StepStatus.SCHEDULED, "test_api", 0)
        assert not StepAttempt.objects.filter(step=step).exists()
        assert step.lease_expires_at is None and step.wake_at > clock.now()
        # An early duplicate job claims nothing before the step's next try.
        assert run_queued_step(str(run.pk), "Call", "limited_queued_call") == "duplicate"
        limits.release(other)
        assert run_queued_step(str(run.pk), "Call", "limited_queued_call") == "succeeded"
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    assert StepAttempt.objects.filter(step__run=run).count() == 1


def test_an_inline_run_waits_for_a_dead_holder_s_slot_to_expire():
    # The holder never gives its slot back (its worker was killed): its lease frees it.
    with override_settings(PIKKU_WORKFLOWS=LIMITED), run_inline(), fake_clock() as clock:
        _fill()
        began = clock.now()
        run = pw.start_workflow("uses_limited", 1)
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    waited = STARTS[0] - began
    lease = timedelta(seconds=30)  # LEASE_TIMEOUT's default
    assert lease <= waited <= lease + timedelta(seconds=limits.CONCURRENCY_RETRY[1])


def test_at_most_the_concurrency_holds_slots_across_takers():
    with override_settings(PIKKU_WORKFLOWS={"LIMITS": {"wide": {"concurrency": 3}}}):
        taken = [limits.acquire(("wide",)) for _ in range(4)]
        assert [type(t).__name__ for t in taken] == ["Held", "Held", "Held", "Blocked"]
        limits.release(taken[0])
        assert isinstance(limits.acquire(("wide",)), limits.Held)


def test_an_override_changes_a_limit_at_runtime():
    with override_settings(PIKKU_WORKFLOWS=LIMITED):
        first = _fill()
        assert isinstance(limits.acquire(("test_api",)), limits.Blocked)
        WorkflowLimit.objects.create(name="test_api", concurrency=2)
        assert limits.effective("test_api").concurrency == 2
        assert isinstance(limits.acquire(("test_api",)), limits.Held)
        WorkflowLimit.objects.filter(name="test_api").delete()
        limits.forget_overrides()
        assert limits.effective("test_api").concurrency == 1
        limits.release(first)


def test_an_undeclared_limit_limits_nothing():
    with override_settings(PIKKU_WORKFLOWS={"LIMITS": {}}):
        assert all(isinstance(limits.acquire(("nowhere",)), limits.Held) for _ in range(5))


def test_a_limit_costs_one_statement_to_take_and_one_to_give_back():
    with override_settings(PIKKU_WORKFLOWS=LIMITED):
        limits.release(_fill())  # its slot rows exist from here on
        with CaptureQueriesContext(connection) as taking:
            held = _fill()
        with CaptureQueriesContext(connection) as giving:
            limits.release(held)
    assert len(taking) == 1
    # PostgreSQL frees the slot and wakes the first waiter in one statement.
    assert len(giving) == (1 if connection.vendor == "postgresql" else 2)


# --- rate ------------------------------------------------------------------------------------


def test_a_rate_allows_n_starts_in_any_window_of_its_period():
    # test_rate is "2/min": the third start waits until a minute after the first.
    with override_settings(PIKKU_WORKFLOWS=LIMITED), run_inline(), fake_clock():
        runs = [pw.start_workflow("uses_rated", n) for n in range(5)]
    assert {WorkflowRun.objects.get(pk=r.pk).status for r in runs} == {"completed"}
    assert len(STARTS) == 5
    for i in range(2, 5):
        assert STARTS[i] - STARTS[i - 2] >= timedelta(minutes=1)


def test_a_busy_rate_doubles_its_slot_rows_rather_than_adding_a_few_each_time():
    busy = {**LIMITED, "LIMITS": {**TEST_LIMITS, "busy": {"rate": "1000/min"}}}
    with override_settings(PIKKU_WORKFLOWS=busy), fake_clock():
        sizes = []
        for _ in range(200):
            assert isinstance(limits.acquire(("busy",)), limits.Held)
            sizes.append(WorkflowLimitSlot.objects.filter(name="busy").count())
    # 200 starts in one period: 32, then as many again each time all are taken.
    assert sorted(set(sizes)) == [32, 64, 128, 256]


# --- recovery --------------------------------------------------------------------------------


class RecordingSweeper(recovery.Sweeper):
    def __init__(self) -> None:
        super().__init__()
        self.passed: set[str] = set()
        self.redispatched: set[str] = set()

    def _pass(self, run_id) -> None:
        self.passed.add(str(run_id))

    def _redispatch(self, step) -> None:
        self.redispatched.add(step.step_name)


def test_recovery_leaves_a_waiting_step_alone_until_its_next_try_is_late():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock() as clock:
        _fill()
        run = pw.start_workflow("uses_limited", 1)
        run_pass(run.pk)
        queued = pw.start_workflow("uses_limited_queued", 1)
        run_pass(queued.pk)
        run_queued_step(str(queued.pk), "Call", "limited_queued_call")
        clock.advance("1s")
        early = RecordingSweeper()
        early.sweep()
        assert early.passed == set() and early.redispatched == set()
        clock.advance("5min")  # both wake-ups were lost
        late = RecordingSweeper()
        late.sweep()
    # The in-pass step's pass retries it; the queued one's job is sent again.
    assert late.passed == {str(run.pk)}
    assert late.redispatched == {"Call"}


# --- what a limit costs a step: its slot rides on the pass's own writes ----------------------

CHEAP = {"DEFAULT_RETRY_DELAY": 0,
         "LIMITS": {**TEST_LIMITS, "test_rate": {"rate": "1000000/min"}}}


def _in_use(name: str = "test_api") -> int:
    return WorkflowLimitSlot.objects.filter(name=name, kind="c", until__gt=clock().now()).count()


def _statements(fn: str, steps: int = 5) -> int:
    with CaptureQueriesContext(connection) as queries:
        run = pw.start_workflow("limited_chain", {"steps": steps, "fn": fn})
    assert WorkflowRun.objects.get(pk=run.pk).status == "completed"
    return len(queries)


def test_a_limited_step_s_slot_is_taken_and_handed_on_by_the_pass_s_own_writes():
    with override_settings(PIKKU_WORKFLOWS=CHEAP), run_inline():
        for fn in ("plain_noop", "limited_noop", "rated_noop"):
            _statements(fn)  # the slot rows exist from here on
        plain, limited, rated = (_statements(fn) for fn in
                                 ("plain_noop", "limited_noop", "rated_noop"))
        assert _in_use() == 0  # the run's end gave its slot back
    if connection.vendor == "postgresql":
        # Each step's start takes (or is handed) its slot in its own statement; the last
        # slot goes back with the run's end: one statement in all.
        assert limited == plain + 1
        assert rated == plain  # a rate's slot is spent, never given back
    else:
        assert limited > plain and rated > plain


def test_a_pass_hands_its_slot_on_only_while_no_step_waits_for_the_limit():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock() as clock:
        other = WorkflowRun.objects.create(workflow="uses_limited", input=1, status="running")
        run = pw.start_workflow("chain_meets_a_waiter", {"other": str(other.pk)})
        assert run_pass(run.pk).kind == "completed"
        waiter = WorkflowStep.objects.get(run=other)
        # The first step's slot was given back when the second began, and the waiter
        # woken (due at once), instead of the second step keeping the slot.
        assert waiter.wake_at == clock.now()
        assert _in_use() == 0
    assert WorkflowRun.objects.get(pk=run.pk).output == 2


def test_a_pass_that_pauses_after_a_limited_step_gives_its_slot_back():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock():
        run = pw.start_workflow("limited_chain", {"steps": 2, "fn": "limited_noop",
                                                  "nap": "1h"})
        assert run_pass(run.pk).kind == "paused"
        assert _in_use() == 0
        assert WorkflowStep.objects.filter(run=run, status="succeeded").count() == 2


def test_a_full_limit_found_by_a_step_s_start_makes_it_wait_and_writes_what_ran():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock():
        other = _fill()
        run = pw.start_workflow("limited_chain", {"steps": 2, "fn": "limited_noop"})
        assert run_pass(run.pk).kind == "paused"
        step = WorkflowStep.objects.get(run=run)
        assert (step.status, step.waiting_for_limit, step.attempt_count) == (
            StepStatus.SCHEDULED, "test_api", 0)
        limits.release(other)
        assert run_pass(run.pk).kind == "completed"
        assert _in_use() == 0


# --- a slot held between two steps, past its lease --------------------------------------------


def test_a_slot_idle_past_its_lease_is_handed_over_only_while_still_the_pass_s():
    # The workflow's own code between its steps outlives LEASE_TIMEOUT: the first step's
    # slot lapses and another worker takes it. The second step must not run beside it
    # (no hand-over of a slot that is no longer the pass's): it waits for the limit.
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock() as clock:
        run = pw.start_workflow("limited_long_gap", {"gap": 60, "other": True})
        assert run_pass(run.pk).kind == "paused"
        (other,) = OTHERS
        assert isinstance(other, limits.Held)
        name, number, holder = other.slots[0]
        slot = WorkflowLimitSlot.objects.get(name=name, kind="c", slot=number)
        assert slot.holder == holder and slot.until > clock.now()  # still the other's
        second = WorkflowStep.objects.get(run=run, step_name="Second")
        assert (second.status, second.waiting_for_limit, second.attempt_count) == (
            StepStatus.SCHEDULED, "test_api", 0)
        assert STARTS == []
        limits.release(other)
        assert run_pass(run.pk).kind == "completed"
        assert _in_use() == 0
    assert len(STARTS) == 1


def test_a_slot_idle_past_its_lease_that_nobody_took_is_still_handed_over():
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock():
        run = pw.start_workflow("limited_long_gap", {"gap": 60})
        assert run_pass(run.pk).kind == "completed"
        assert _in_use() == 0


def test_giving_back_a_slot_another_holder_took_wakes_no_waiter():
    # The pass's lapsed slot went to another worker: giving it back frees nothing, so
    # the step waiting for the limit keeps its place (its wake-up is not spent on a
    # full limit).
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), fake_clock() as clock:
        waiting = WorkflowRun.objects.create(workflow="uses_limited", input=1,
                                             status="running")
        run = pw.start_workflow("limited_long_gap", {"gap": 60, "other": True,
                                                     "waiter": str(waiting.pk)})
        assert run_pass(run.pk).kind == "paused"
        waiter = WorkflowStep.objects.get(run=waiting)
        assert waiter.wake_at == waiter.waiting_since + timedelta(minutes=5)
        (other,) = OTHERS
        limits.release(other)  # a give-back that frees the slot wakes a waiter
        woken = WorkflowStep.objects.filter(waiting_for_limit="test_api",
                                            status="scheduled", wake_at=clock.now())
        assert woken.count() == 1
