"""Flow control (DESIGN 8.4): workflow concurrency per key (queue, skip, cancel_running),
debounced starts and run deadlines, on the engine clock, SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows import operations
from pikku_workflows.engine import flow
from pikku_workflows.models import WorkflowRun, WorkflowScheduleTick
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock, run_inline, run_scheduler

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def inline():
    with run_inline():
        yield


def start(name, data, **options):
    return pw.start_workflow(name, data, **options)


def fresh(run):
    return WorkflowRun.objects.get(pk=run.pk)


def statuses(*runs):
    return [fresh(run).status for run in runs]


# --- concurrency: queue ------------------------------------------------------------------


def test_a_key_runs_one_at_a_time_first_in_first_out_and_other_keys_are_free():
    a1, a2, a3 = (start("flow_per_customer", {"customer": "a", "n": n}) for n in (1, 2, 3))
    b1 = start("flow_per_customer", {"customer": "b", "n": 4})
    assert statuses(a1, a2, a3, b1) == ["suspended", "scheduled", "scheduled", "suspended"]
    waiting = fresh(a2)
    assert (waiting.waiting_for, waiting.concurrency_key) == ("concurrency", "a")
    assert fresh(b1).concurrency_key == "b"
    assert not waiting.steps.exists()  # nothing of a queued run ran

    pw.resume_run(a1.pk)  # its end starts the oldest queued run of its key at once
    assert statuses(a1, a2, a3) == ["completed", "suspended", "scheduled"]
    assert fresh(a2).waiting_for == ""
    pw.resume_run(a2.pk)
    assert statuses(a2, a3) == ["completed", "suspended"]
    pw.resume_run(a3.pk)
    pw.resume_run(b1.pk)
    assert statuses(a1, a2, a3, b1) == ["completed"] * 4


def test_max_two_holds_two_slots_and_cancelling_a_holder_frees_one():
    runs = [start("flow_two_slots", n) for n in range(4)]
    assert statuses(*runs) == ["suspended", "suspended", "scheduled", "scheduled"]
    assert fresh(runs[0]).concurrency_key == ""  # key=None: one key for every run
    pw.cancel_run(runs[1].pk)
    assert statuses(*runs) == ["suspended", "cancelled", "suspended", "scheduled"]
    pw.cancel_run(runs[3].pk)  # a queued run cancelled: nothing of it runs
    assert statuses(*runs) == ["suspended", "cancelled", "suspended", "cancelled"]
    assert not fresh(runs[3]).steps.exists()


def test_runs_waiting_for_an_operator_hold_no_slot():
    holder = start("flow_per_customer", {"customer": "a", "n": 1})
    queued = start("flow_per_customer", {"customer": "a", "n": 2})
    # A rolling deploy left the holder waiting for an operator (RPC_NOT_FOUND).
    WorkflowRun.objects.filter(pk=holder.pk).update(
        error={"code": "RPC_NOT_FOUND", "message": "step function missing"})
    assert flow.holders("flow_per_customer", "a") == []
    run_scheduler()  # the time keeper's safety net fills the freed slot
    assert statuses(holder, queued) == ["suspended", "suspended"]


def test_the_time_keeper_starts_a_queued_run_whose_holder_ended_without_freeing_it():
    holder = start("flow_per_customer", {"customer": "a", "n": 1})
    queued = start("flow_per_customer", {"customer": "a", "n": 2})
    # A process that died between the holder's end and the start of the next run.
    WorkflowRun.objects.filter(pk=holder.pk).update(status="completed")
    assert fresh(queued).status == "scheduled"
    run_scheduler()
    assert fresh(queued).status == "suspended"


def test_holder_counts_count_as_holders_does():
    def run(status, key="a", **fields):
        return WorkflowRun.objects.create(workflow="flow_per_customer", concurrency_key=key,
                                          status=status, input={}, **fields)

    parent = run("running")
    run("running", parent_run=parent)  # under its parent's slot
    run("suspended", error={"code": "WAITING_FOR_EVENT"})
    run("suspended", error={"code": "RPC_NOT_FOUND"})  # waits for an operator
    run("scheduled", waiting_for=flow.WAITING_CONCURRENCY)
    run("completed")
    run("running", key="b")
    run("running", parent_run=run("running", key="b"))  # its parent holds another key
    counts = flow.holder_counts([("flow_per_customer", "a"), ("flow_per_customer", "c")])
    assert counts == {("flow_per_customer", "a"): 3}
    assert len(flow.holders("flow_per_customer", "a")) == 3
    assert flow.holder_counts([("flow_per_customer", "b")]) == {("flow_per_customer", "b"): 2}


def test_the_safety_net_costs_the_same_queries_for_one_busy_key_as_for_twenty():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from pikku_workflows.runtime.scheduler import scheduler_pass

    def busy(first, count):
        for n in range(first, first + count):
            start("flow_per_customer", {"customer": f"c{n}", "n": 1})
            start("flow_per_customer", {"customer": f"c{n}", "n": 2})

    def pass_queries():
        with CaptureQueriesContext(connection) as queries:
            scheduler_pass()
        return len(queries)

    busy(0, 1)
    one = pass_queries()
    busy(1, 19)
    assert pass_queries() == one  # no key's lock taken: each has its one slot held
    assert WorkflowRun.objects.filter(status="scheduled").count() == 20


def test_an_end_that_frees_no_slot_looks_once_and_takes_no_lock():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    runs = [start("flow_two_slots", n) for n in range(3)]
    with CaptureQueriesContext(connection) as queries:
        assert flow.release("flow_two_slots", "", 2) == []
    assert len(queries) == 1 and "advisory" not in queries[0]["sql"]
    assert statuses(*runs) == ["suspended", "suspended", "scheduled"]
    WorkflowRun.objects.filter(pk=runs[0].pk).update(status="completed")
    [promoted] = flow.release("flow_two_slots", "", 2)
    assert promoted.pk == runs[2].pk and promoted.status == "running"


def test_a_child_run_of_a_holder_with_the_same_key_needs_no_slot():
    run = start("flow_parent", {"k": "x"})
    assert fresh(run).status == "completed"
    child = WorkflowRun.objects.get(parent_run=run)
    assert child.concurrency_key == "x" and child.status == "completed"


def test_a_graph_workflow_declares_concurrency_too():
    first = start("flow_graph", {"k": "g"})
    second = start("flow_graph", {"k": "g"})
    other = start("flow_graph", {"k": "h"})
    assert statuses(first, second, other) == ["suspended", "scheduled", "suspended"]
    assert not fresh(second).steps.exists()
    pw.send_event("go", key="g", data=1)  # the second run was created before it: it
    run_scheduler()                       # gets it too, once the first one's slot frees
    assert statuses(first, second) == ["completed", "completed"]
    assert fresh(second).steps.earliest("created_at").created_at >= fresh(first).finished_at


def test_a_delayed_start_queues_for_a_slot_when_its_time_comes():
    with fake_clock(T0) as clock:
        holder = start("flow_per_customer", {"customer": "a", "n": 1})
        later = start("flow_per_customer", {"customer": "a", "n": 2}, delay="1min")
        assert (fresh(later).status, fresh(later).waiting_for) == ("scheduled", "")
        clock.advance("2min")
        assert (fresh(later).status, fresh(later).waiting_for) == ("scheduled",
                                                                   "concurrency")
        pw.resume_run(holder.pk)
        assert fresh(later).status == "suspended"


# --- concurrency: skip and cancel_running ------------------------------------------------


def test_skip_ends_the_new_run_cancelled_concurrency_limited():
    first = start("flow_skips", {"k": 1})
    second = start("flow_skips", {"k": 1})
    other = start("flow_skips", {"k": 2})
    assert statuses(first, second, other) == ["suspended", "cancelled", "suspended"]
    error = fresh(second).error
    assert error["code"] == "CONCURRENCY_LIMITED"
    assert "workflow 'flow_skips' (key '1')" in error["message"]
    assert fresh(first).concurrency_key == "1"  # a number's key is its JSON


def test_cancel_running_cancels_the_oldest_live_run_through_the_cancel_path():
    first = start("flow_replaces", {"k": "a"})
    second = start("flow_replaces", {"k": "A"})  # the callable makes both "A"
    assert statuses(first, second) == ["cancelled", "suspended"]
    assert fresh(first).error["code"] == "WORKFLOW_CANCELLED"
    assert "cancel_running" in fresh(first).error["message"]
    assert fresh(second).concurrency_key == "A"
    third = start("flow_replaces", {"k": "a"})
    assert statuses(first, second, third) == ["cancelled", "cancelled", "suspended"]


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({"max": 0}, "max must be an integer of at least 1, not 0"),
    ({"max": True}, "max must be an integer"),
    ({"max": 1.5}, "max must be an integer"),
    ({"key": ""}, "key must be a dotted path"),
    ({"key": "a..b"}, "key must be a dotted path"),
    ({"key": 3}, "key must be a dotted path"),
    ({"on_full": "drop"}, "on_full 'drop' is not one of queue, skip, cancel_running"),
])
def test_a_bad_concurrency_is_refused_at_declaration(options, message):
    with pytest.raises(pw.WorkflowDefinitionError, match=message):
        pw.Concurrency(**options)


def test_a_workflow_declaration_refuses_a_bad_concurrency_or_timeout():
    with registry.isolated():
        with pytest.raises(pw.WorkflowDefinitionError, match="must be a Concurrency"):
            pw.workflow(name="flow_bad", concurrency={"max": 1})(lambda wf, data: None)
        with pytest.raises(pw.WorkflowDefinitionError, match="timeout must be positive"):
            pw.workflow(name="flow_bad", timeout=0)(lambda wf, data: None)
        with pytest.raises(pw.WorkflowDefinitionError, match="invalid timeout 'soon'"):
            pw.graph_workflow("flow_bad_graph", {"A": "flow_note"}, timeout="soon")
        assert registry.find_workflow("flow_bad") is None


@pytest.mark.parametrize(("data", "message"), [
    ({"n": 1}, "path 'customer' is missing from the input: the input has no 'customer'"),
    ({"customer": None, "n": 1}, "is null in the input"),
    ({"customer": "x" * 256, "n": 1}, "256 characters long; the limit is 255"),
])
def test_a_key_missing_from_the_input_is_refused_at_start_and_nothing_is_written(
        data, message):
    with pytest.raises(pw.WorkflowInputError, match=message) as caught:
        start("flow_per_customer", data)
    assert "workflow 'flow_per_customer'" in str(caught.value)
    assert not WorkflowRun.objects.exists()


def test_a_key_path_walks_nested_objects_and_lists():
    concurrency = pw.Concurrency(key="order.lines.1.sku")
    data = {"order": {"lines": [{"sku": "a"}, {"sku": "b"}]}}
    assert flow.key_for(concurrency, data, "w") == "b"
    with pytest.raises(pw.WorkflowInputError, match=r"input\.order\.lines has no '2'"):
        flow.key_for(pw.Concurrency(key="order.lines.2.sku"), data, "w")


def test_a_key_callable_that_raises_is_a_clear_input_error():
    with pytest.raises(pw.WorkflowInputError, match="callable raised KeyError"):
        start("flow_replaces", {"other": 1})
    assert not WorkflowRun.objects.exists()


# --- deadlines ---------------------------------------------------------------------------


def test_a_sleeping_run_past_its_timeout_fails_deadline_exceeded():
    with fake_clock(T0):
        run = start("flow_sleeps", 2 * 3600)  # the workflow's timeout is one hour
        run = fresh(run)
    assert run.deadline_at == T0 + timedelta(hours=1)
    assert run.run_timeout == 3600
    assert run.status == "failed" and run.error["code"] == "DEADLINE_EXCEEDED"
    assert not run.steps.filter(step_name="After").exists()


def test_run_timeout_overrides_the_workflow_timeout():
    with fake_clock(T0):
        run = fresh(start("flow_sleeps", 2 * 3600, run_timeout="3h"))
    assert run.status == "completed" and run.deadline_at == T0 + timedelta(hours=3)


def test_a_step_start_past_the_deadline_fails_the_run():
    with fake_clock(T0):
        run = fresh(start("flow_slow_steps", 120))  # its first step takes 2 min of 1
    assert run.status == "failed" and run.error["code"] == "DEADLINE_EXCEEDED"
    assert "at a step start" in run.error["message"]
    assert list(run.steps.values_list("step_name", flat=True)) == ["Slow"]


@pytest.mark.parametrize("waits", ["suspend", "event"])
def test_the_time_keeper_fails_a_suspended_or_waiting_run_at_its_deadline(waits):
    with fake_clock(T0) as clock:
        run = start("flow_waits", waits, run_timeout="30min")
        assert fresh(run).status == "suspended"
        clock.advance("29min")
        assert fresh(run).status == "suspended"
        clock.advance("2min")
    run = fresh(run)
    assert run.status == "failed" and run.error["code"] == "DEADLINE_EXCEEDED"
    assert "while suspended" in run.error["message"]
    assert run.finished_at == T0 + timedelta(minutes=30)


def test_a_run_waiting_for_a_slot_fails_at_its_deadline_and_frees_nothing_it_had():
    with fake_clock(T0) as clock:
        holder = start("flow_per_customer", {"customer": "a", "n": 1})
        queued = start("flow_per_customer", {"customer": "a", "n": 2}, run_timeout="5min")
        assert fresh(queued).deadline_at == T0 + timedelta(minutes=5)
        clock.advance("6min")
    queued = fresh(queued)
    assert queued.status == "failed" and queued.error["code"] == "DEADLINE_EXCEEDED"
    assert "waiting to start (for concurrency)" in queued.error["message"]
    assert fresh(holder).status == "suspended"


def test_a_queued_run_without_a_deadline_gets_one_when_it_takes_a_slot():
    with fake_clock(T0) as clock:
        holder = start("flow_per_customer", {"customer": "a", "n": 1})
        queued = start("flow_per_customer", {"customer": "a", "n": 2}, run_timeout="5min")
        WorkflowRun.objects.filter(pk=queued.pk).update(deadline_at=None)
        clock.advance("1min")
        pw.resume_run(holder.pk)
        assert fresh(queued).status == "suspended"
        assert fresh(queued).deadline_at == T0 + timedelta(minutes=6)


def test_a_delayed_run_s_deadline_counts_from_its_start_time():
    with fake_clock(T0) as clock:
        run = start("flow_waits", "suspend", delay="1h", run_timeout="10min")
        assert fresh(run).deadline_at is None
        clock.advance("1h")
        assert fresh(run).deadline_at == T0 + timedelta(hours=1, minutes=10)
        clock.advance("11min")
    assert fresh(run).error["code"] == "DEADLINE_EXCEEDED"


def test_a_child_gets_the_earlier_of_its_own_deadline_and_its_parent_s():
    with fake_clock(T0):
        parent = fresh(start("flow_parent_of_sleeper", 3600))
    child = WorkflowRun.objects.get(parent_run=parent)
    assert parent.deadline_at == T0 + timedelta(minutes=10)
    assert child.deadline_at == T0 + timedelta(minutes=10)  # not its own hour
    assert child.status == "failed" and child.error["code"] == "DEADLINE_EXCEEDED"
    assert parent.status == "failed"


def test_the_deadline_is_stored_and_retry_starts_a_fresh_one():
    with fake_clock(T0) as clock:
        run = fresh(start("flow_waits", "suspend", run_timeout="10min"))
        clock.advance("11min")
        assert fresh(run).status == "failed"
        retried = pw.retry_run(run.pk)
        assert retried.deadline_at == T0 + timedelta(minutes=21)


def test_a_bad_run_timeout_is_refused_before_anything_is_written():
    for value, message in ((0, "must be a positive duration"),
                           ("soon", "invalid run_timeout 'soon'"),
                           (-1, "must not be negative")):
        with pytest.raises(pw.WorkflowInputError, match=message):
            start("flow_waits", "suspend", run_timeout=value)
    assert not WorkflowRun.objects.exists()


# --- debounce ----------------------------------------------------------------------------


def test_fifty_starts_within_the_period_make_one_run_with_the_last_input():
    with fake_clock(T0) as clock:
        runs = []
        for n in range(50):
            runs.append(start("flow_echo", n, debounce=pw.Debounce("doc-1", period="5s")))
            clock.advance("1s")
        assert len({run.pk for run in runs}) == 1
        run = fresh(runs[0])
        assert (run.status, run.waiting_for, run.input) == ("scheduled", "debounce", 49)
        assert run.wire["debounce"]["starts"] == 50
        clock.advance("5s")
    run = fresh(runs[0])
    assert run.status == "completed" and run.output == 49
    assert WorkflowRun.objects.count() == 1


def test_max_wait_bounds_the_delay_under_a_continuous_stream():
    with fake_clock(T0) as clock:
        seen = set()
        for n in range(30):  # a start every second for 30 s, period 5 s, max_wait 10 s
            seen.add(start("flow_echo", n, debounce=pw.Debounce("k", "5s", "10s")).pk)
            clock.advance("1s")
        clock.advance("10s")
    runs = list(WorkflowRun.objects.order_by("created_at"))
    assert len(runs) == len(seen) == 3
    assert [run.status for run in runs] == ["completed"] * 3
    # Windows opened at 0 s, 10 s and 20 s each started max_wait later, with the input of
    # the last start before then (the start at 10 s opened the next window).
    assert [run.output for run in runs] == [9, 19, 29]


def test_different_debounce_keys_are_independent():
    with fake_clock(T0) as clock:
        a = start("flow_echo", "a", debounce=pw.Debounce("a", "5s"))
        b = start("flow_echo", "b", debounce=pw.Debounce("b", "5s"))
        assert a.pk != b.pk and a.debounce_key == "a"
        clock.advance("6s")
    assert statuses(a, b) == ["completed", "completed"]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: pw.Debounce(""), "debounce key must be a non-empty string"),
    (lambda: pw.Debounce("k" * 256), "256 characters long; the limit is 255"),
    (lambda: pw.Debounce("k", period=0), "period 0 must be positive"),
    (lambda: pw.Debounce("k", period="later"), "invalid debounce period 'later'"),
    (lambda: pw.Debounce("k", max_wait=0), "max_wait 0 must be positive"),
])
def test_a_bad_debounce_is_refused(make, message):
    with pytest.raises(pw.WorkflowInputError, match=message):
        make()


def test_debounce_does_not_combine_with_a_delay_or_an_idempotency_key():
    for options in ({"delay": "1min"}, {"idempotency_key": "x"}):
        with pytest.raises(pw.WorkflowInputError, match="debounce cannot be combined"):
            start("flow_echo", 1, debounce=pw.Debounce("k"), **options)
    assert not WorkflowRun.objects.exists()


def test_a_fork_starts_a_fresh_deadline_and_keeps_the_key():
    with fake_clock(T0) as clock:
        run = fresh(start("flow_waits", "suspend", run_timeout="10min"))
        clock.advance("11min")
        assert fresh(run).error["code"] == "DEADLINE_EXCEEDED"
        fork = pw.fork_run(run.pk)
        assert fork.deadline_at == T0 + timedelta(minutes=21)
        assert fork.run_timeout == 600 and fork.status == "suspended"


def test_a_graph_workflow_s_timeout_fails_its_waiting_run():
    with registry.isolated():
        pw.graph_workflow("flow_graph_timed", {"Wait": None},
                          {"Wait": {"wait_for_event": {"event": "never"}}}, timeout="1min")
        with fake_clock(T0) as clock:
            run = start("flow_graph_timed", {})
            assert fresh(run).status == "suspended"
            clock.advance("2min")
    assert fresh(run).error["code"] == "DEADLINE_EXCEEDED"


def test_run_to_completion_takes_a_slot_and_a_deadline_too():
    with fake_clock(T0):
        holder = start("flow_per_customer", {"customer": "a", "n": 1})
        with pytest.raises(TimeoutError):
            pw.run_to_completion("flow_per_customer", {"customer": "a", "n": 2},
                                 timeout=1)
        queued = WorkflowRun.objects.exclude(pk=holder.pk).get()
        assert (queued.status, queued.waiting_for) == ("scheduled", "concurrency")
        with pytest.raises(pw.WorkflowRunFailedError, match="passed its deadline"):
            pw.run_to_completion("flow_sleeps", 2 * 3600)


def test_a_debounced_run_takes_the_slot_of_its_last_input_s_key_when_its_window_ends():
    with fake_clock(T0) as clock:
        holder = start("flow_per_customer", {"customer": "b", "n": 1})
        window = start("flow_per_customer", {"customer": "a", "n": 2},
                       debounce=pw.Debounce("w", "5s"))
        start("flow_per_customer", {"customer": "b", "n": 3}, debounce=pw.Debounce("w", "5s"))
        assert fresh(window).concurrency_key == "b"
        clock.advance("6s")
        assert (fresh(window).status, fresh(window).waiting_for) == ("scheduled",
                                                                     "concurrency")
        pw.resume_run(holder.pk)
        assert fresh(window).status == "suspended"
        assert fresh(window).input == {"customer": "b", "n": 3}


# --- concurrency: schedule ticks, retries and resumes take the same admission ----------------


@pytest.fixture
def schedules():
    """Declare schedules for one test (the registry is restored after it)."""
    with registry.isolated():
        registry._schedules = {}  # none but the test's (the demo app declares one)
        yield pw.schedule


def tick_runs(name):
    return list(WorkflowRun.objects.filter(schedule__name=name).order_by("scheduled_at"))


def test_a_schedule_s_tick_waits_for_a_slot_as_a_start_does(schedules):
    schedules("acme_billing", "flow_per_customer", every="1min", overlap="allow",
              input={"customer": "a", "n": 2})
    with fake_clock(T0 + timedelta(seconds=30)) as clock:
        holder = start("flow_per_customer", {"customer": "a", "n": 1})
        run_scheduler()  # synced: the first tick is at T0 + 1 min
        clock.advance("30s")
        (ticked,) = tick_runs("acme_billing")
        assert (ticked.status, ticked.waiting_for) == ("scheduled", "concurrency")
        assert ticked.waiting_since == T0 + timedelta(minutes=1)
        assert not ticked.steps.exists()  # nothing of it ran beside the holder
        tick = WorkflowScheduleTick.objects.get(run=ticked)
        assert tick.status == "started" and "waits for a concurrency slot" in tick.detail
        pw.resume_run(holder.pk)  # the holder ends: the tick's run takes its slot
        ticked.refresh_from_db()
        assert (ticked.status, ticked.waiting_for, ticked.waiting_since) == (
            "suspended", "", None)


def test_ticks_of_one_pass_count_each_other_s_slots(schedules):
    # A catch-up pass fires three ticks at once: one runs, two queue behind it.
    schedules("catching_up", "flow_per_customer", every="1min", overlap="allow",
              catchup="10min", input={"customer": "b", "n": 1})
    with fake_clock(T0 + timedelta(seconds=30)):
        run_scheduler()
    with fake_clock(T0 + timedelta(minutes=3, seconds=30)):
        run_scheduler()
        runs = tick_runs("catching_up")
        assert [run.status for run in runs] == ["suspended", "scheduled", "scheduled"]
        assert len(flow.holders("flow_per_customer", "b")) == 1
        pw.resume_run(runs[0].pk)
        assert statuses(*runs) == ["completed", "suspended", "scheduled"]


def test_a_tick_follows_on_full_skip_and_a_key_missing_from_the_schedule_s_input(schedules):
    schedules("skipping", "flow_skips", every="1min", overlap="allow", input={"k": 1})
    schedules("keyless", "flow_skips", every="1min", overlap="allow", input={"n": 1})
    with fake_clock(T0 + timedelta(seconds=30)) as clock:
        holder = start("flow_skips", {"k": 1})
        run_scheduler()
        clock.advance("30s")
        (skipped,) = tick_runs("skipping")
        assert (skipped.status, skipped.error["code"]) == ("cancelled", "CONCURRENCY_LIMITED")
        assert WorkflowScheduleTick.objects.get(run=skipped).status == "skipped"
        assert fresh(holder).status == "suspended"
        assert not tick_runs("keyless")  # nothing written for it but its tick
        tick = WorkflowScheduleTick.objects.get(schedule__name="keyless")
        assert tick.status == "skipped"
        assert "concurrency key path 'k' is missing from the input" in tick.detail


def test_a_buffered_tick_run_queues_for_a_slot_when_its_turn_comes(schedules):
    schedules("buffered", "flow_per_customer", every="1min", overlap="buffer_one",
              input={"customer": "c", "n": 1})
    with fake_clock(T0 + timedelta(seconds=30)) as clock:
        run_scheduler()
        clock.advance("90s")
        first, buffered = tick_runs("buffered")
        assert (first.status, buffered.status, buffered.waiting_for) == (
            "suspended", "scheduled", "")
        other = start("flow_per_customer", {"customer": "c", "n": 9})  # queued after first
        pw.resume_run(first.pk)  # the key's slot goes to the run queued first
        assert statuses(other) == ["suspended"]
        run_scheduler()  # a time keeper pass: the buffered run's turn
        buffered.refresh_from_db()
        assert (buffered.status, buffered.waiting_for) == ("scheduled", "concurrency")
        pw.resume_run(other.pk)
        assert statuses(buffered) == ["suspended"]


def test_a_retried_run_waits_for_its_key_s_slot_instead_of_running_beside_the_holder():
    with fake_clock(T0) as clock:
        first = start("flow_per_customer", {"customer": "a", "n": 1})
        pw.cancel_run(first.pk)
        WorkflowRun.objects.filter(pk=first.pk).update(status="failed")  # a failed run
        holder = start("flow_per_customer", {"customer": "a", "n": 2})
        clock.advance("5min")
        retried = pw.retry_run(first.pk)
        assert (retried.status, retried.waiting_for) == ("scheduled", "concurrency")
        assert retried.waiting_since == T0 + timedelta(minutes=5)
        assert flow.holders("flow_per_customer", "a") == [holder.pk]
        assert operations.flow_wait(fresh(first)) == \
            "waiting for a concurrency slot of flow_per_customer (key a): 1 running"
        pw.resume_run(holder.pk)  # the holder ends: the retried run carries on
        assert statuses(first, holder) == ["suspended", "completed"]
        assert fresh(first).waiting_since is None


def test_a_retried_run_with_a_free_slot_carries_on_at_once():
    first = start("flow_per_customer", {"customer": "a", "n": 1})
    pw.cancel_run(first.pk)
    WorkflowRun.objects.filter(pk=first.pk).update(status="failed")
    assert pw.retry_run(first.pk).status == "suspended"


def test_a_resumed_run_that_waited_for_an_operator_waits_for_its_slot():
    parked = start("flow_per_customer", {"customer": "a", "n": 1})
    # A rolling deploy parked it (RPC_NOT_FOUND): it holds no slot; another run takes it.
    WorkflowRun.objects.filter(pk=parked.pk).update(
        error={"code": "RPC_NOT_FOUND", "message": "step function missing", "step": "hold"})
    holder = start("flow_per_customer", {"customer": "a", "n": 2})
    assert statuses(parked, holder) == ["suspended", "suspended"]
    resumed = pw.resume_run(parked.pk)
    assert (resumed.status, resumed.waiting_for) == ("scheduled", "concurrency")
    assert flow.holders("flow_per_customer", "a") == [holder.pk]
    pw.resume_run(holder.pk)
    assert statuses(parked, holder) == ["suspended", "completed"]


def test_an_approval_answer_to_a_parked_run_waits_for_its_slot():
    parked = start("flow_approves", {"customer": "a"})
    WorkflowRun.objects.filter(pk=parked.pk).update(
        error={"code": "VERSION_CONFLICT", "message": "the code changed", "step": "x"})
    holder = start("flow_approves", {"customer": "a"})
    assert statuses(holder) == ["suspended"]
    pw.approve_step(parked.pk, "Sign-off", {"approved": True})
    assert (fresh(parked).status, fresh(parked).waiting_for) == ("scheduled", "concurrency")
    pw.approve_step(holder.pk, "Sign-off", {"approved": True})
    assert statuses(holder, parked) == ["completed", "completed"]


# --- forks are admitted like starts ---------------------------------------------------------


def test_a_fork_queues_for_its_key_s_slot_like_a_start():
    source = start("flow_per_customer", {"customer": "a", "n": 1})
    pw.resume_run(source.pk)
    holder = start("flow_per_customer", {"customer": "a", "n": 2})
    assert statuses(source, holder) == ["completed", "suspended"]
    fork = pw.fork_run(source.pk)
    assert (fork.status, fork.waiting_for, fork.concurrency_key) == (
        "scheduled", "concurrency", "a")
    assert fork.waiting_since is not None
    assert not fork.steps.filter(status="running").exists()  # nothing of it ran
    pw.resume_run(holder.pk)  # the holder's end starts the queued fork
    assert statuses(holder, fork) == ["completed", "suspended"]
    pw.resume_run(fork.pk)
    assert fresh(fork).status == "completed"


def test_a_fork_with_a_new_input_takes_the_slot_of_its_own_key():
    source = start("flow_per_customer", {"customer": "a", "n": 1})
    pw.resume_run(source.pk)
    start("flow_per_customer", {"customer": "a", "n": 2})  # holds a's slot
    fork = pw.fork_run(source.pk, input={"customer": "b", "n": 3})
    assert (fork.status, fork.concurrency_key) == ("suspended", "b")


def test_a_fork_follows_on_full_skip_and_cancel_running():
    skipped_source = start("flow_skips", {"k": 1})
    pw.cancel_run(skipped_source.pk)
    holder = start("flow_skips", {"k": 1})
    fork = pw.fork_run(skipped_source.pk)
    assert (fork.status, fork.error["code"]) == ("cancelled", "CONCURRENCY_LIMITED")
    assert fresh(holder).status == "suspended"

    replaced_source = start("flow_replaces", {"k": "a"})
    pw.cancel_run(replaced_source.pk)
    running = start("flow_replaces", {"k": "a"})
    fork = pw.fork_run(replaced_source.pk)
    assert statuses(running, fork) == ["cancelled", "suspended"]
    assert "cancel_running" in fresh(running).error["message"]
