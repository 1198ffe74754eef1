"""Schedules and delayed starts (DESIGN 8.1): cadences and time zones, declarations, overlap
policies, manual triggers and backfills, catch-up, sync, ``wf.scheduled_at``."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows import operations
from pikku_workflows.engine.cadence import check_cadence
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock, run_inline, run_scheduler

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
#: Half a minute past T0: a minutely schedule synced then first ticks at T0 + 1 min.
START = T0 + timedelta(seconds=30)


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def ticks_of(name):
    return list(WorkflowScheduleTick.objects.filter(schedule__name=name).order_by("tick_at"))


def summary(name):
    return [(t.tick_at, t.status, t.trigger) for t in ticks_of(name)]


@pytest.fixture
def declared():
    """Declare schedules for one test (the registry is restored after it)."""
    with registry.isolated(), run_inline():
        registry._schedules = {}  # none but the test's (the demo app declares one)
        yield pw.schedule


# --- cadence -----------------------------------------------------------------------------


@pytest.mark.parametrize(("cron", "message"), [
    ("61 * * * *", "invalid cron expression '61 \\* \\* \\* \\*'"),
    ("* * * *", "expected 5 fields"),
    ("* * * * * *", "expected 5 fields"),
    ("0 0 31 2 *", "Bad day-of-month"),
    ("every day", "expected 5 fields"),
    (",".join(str(m) for m in range(60)) + " " + ",".join(str(h) for h in range(24))
     + " * * *", "the limit is 200"),
])
def test_an_invalid_cron_expression_is_refused_naming_it(cron, message):
    with pytest.raises(pw.WorkflowScheduleError, match=message) as caught:
        check_cadence(cron=cron)
    assert caught.value.code == "INVALID_SCHEDULE" and caught.value.field == "cron"
    assert caught.value.http_status == 400


def test_every_ticks_fall_on_the_epoch_grid_or_from_start_at():
    cadence = check_cadence(every="10min")
    assert cadence.next_after(utc(2026, 1, 1, 0, 4)) == utc(2026, 1, 1, 0, 10)
    assert cadence.first_from(utc(2026, 1, 1, 0, 10)) == utc(2026, 1, 1, 0, 10)
    anchored = check_cadence(every=90, start_at=utc(2026, 1, 1, 0, 0, 5))
    assert anchored.next_after(utc(2025, 1, 1)) == utc(2026, 1, 1, 0, 0, 5)
    assert list(anchored.between(utc(2026, 1, 1), utc(2026, 1, 1, 0, 3, 5))) == [
        utc(2026, 1, 1, 0, 0, 5), utc(2026, 1, 1, 0, 1, 35), utc(2026, 1, 1, 0, 3, 5)]
    ended = check_cadence(every="1h", start_at=utc(2026, 1, 1), end_at=utc(2026, 1, 1, 2))
    assert list(ended.ticks_after(utc(2025, 1, 1))) == [
        utc(2026, 1, 1), utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)]
    assert ended.count_between(utc(2020, 1, 1), utc(2030, 1, 1)) == 3


def test_a_cron_every_half_hour_skips_the_clocks_gap_once_and_the_repeated_hour():
    cadence = check_cadence(cron="*/30 * * * *", tz="Europe/Paris")
    spring = [t.strftime("%H:%M") for t in cadence.between(utc(2026, 3, 29, 0),
                                                            utc(2026, 3, 29, 2))]
    # 02:00 and 02:30 local do not exist: one tick at 03:00 CEST (01:00 UTC).
    assert spring == ["00:00", "00:30", "01:00", "01:30", "02:00"]
    autumn = [t.strftime("%H:%M") for t in cadence.between(utc(2026, 10, 24, 23),
                                                            utc(2026, 10, 25, 3))]
    # 02:00 and 02:30 local happen twice: each fires once, at its first occurrence.
    assert autumn == ["23:00", "23:30", "00:00", "00:30", "02:00", "02:30", "03:00"]


@pytest.mark.parametrize(("tz", "cron", "start", "expected"), [
    # Spring forward: 02:30 does not exist that night; it fires once at 03:00 local.
    ("Europe/Paris", "30 2 * * *", utc(2026, 3, 27, 12),
     [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),
    ("America/New_York", "30 2 * * *", utc(2026, 3, 6, 12),
     [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]),
    # Fall back: 02:30 (Paris) and 01:30 (New York) happen twice; once, the first.
    ("Europe/Paris", "30 2 * * *", utc(2026, 10, 23, 12),
     [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
    ("America/New_York", "30 1 * * *", utc(2026, 10, 30, 12),
     [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
])
def test_daylight_saving_days_fire_once_driven_by_the_fake_clock(declared, tz, cron, start,
                                                                 expected):
    declared("nightly", "sched_echo", cron=cron, tz=tz)
    with fake_clock(start) as clock:
        assert run_scheduler() == []
        clock.advance("3d")
    ticks = ticks_of("nightly")
    assert [t.tick_at for t in ticks] == expected
    assert {t.status for t in ticks} == {"started"}
    runs = [t.run for t in ticks]
    assert [r.status for r in runs] == ["completed"] * 3
    # Each run saw its own tick time.
    assert [r.output["scheduled_at"] for r in runs] == [t.isoformat() for t in expected]


# --- declarations ------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"cron": "bad cron"}, "cron", "invalid cron expression"),
    ({"cron": "0 * * * *", "tz": "Mars/Olympus"}, "tz", "unknown time zone 'Mars/Olympus'"),
    ({"cron": "0 * * * *", "every": "1h"}, "cron", "exactly one of cron and every, not both"),
    ({}, "cron", "exactly one of cron and every, not neither"),
    ({"every": "500ms"}, "every", "under one second"),
    ({"every": "soon"}, "every", "invalid every 'soon'"),
    ({"every": "1h", "workflow": "no_such_workflow"}, "workflow",
     "no workflow is registered as 'no_such_workflow'"),
    ({"every": "1h", "start_at": utc(2026, 1, 2), "end_at": utc(2026, 1, 1)}, "end_at",
     "end_at 2026-01-01T00:00:00\\+00:00 is not after start_at"),
    ({"every": "1h", "start_at": datetime(2026, 1, 2)}, "start_at", "has no time zone"),
    ({"every": "1h", "overlap": "queue"}, "overlap", "overlap 'queue' is not one of"),
    ({"every": "1h", "catchup": "-1s"}, "catchup", "invalid catchup"),
    ({"every": "1h", "workflow": "sched_typed", "input": {"n": "many"}}, "input",
     "invalid input for workflow 'sched_typed'"),
    ({"every": "1h", "input": {"x": object()}}, "input", "not JSON-serializable"),
    ({"every": "1h", "name": "a/b"}, "name", "must not contain '/'"),
    ({"every": "1h", "name": "n" * 151}, "name", "the limit is 150"),
])
def test_an_invalid_declaration_is_a_clear_error_and_nothing_is_written(declared, fields,
                                                                        field, message):
    kwargs = {"name": "bad", "workflow": "sched_echo", **fields}
    name, workflow = kwargs.pop("name"), kwargs.pop("workflow")
    with pytest.raises(pw.WorkflowScheduleError, match=message) as caught:
        declared(name, workflow, **kwargs)
    assert caught.value.field == field and caught.value.code == "INVALID_SCHEDULE"
    assert registry.schedules() == []
    with fake_clock(T0):
        run_scheduler()
    assert not WorkflowSchedule.objects.exists()
    # The same rules for an admin-made schedule (the form's and the API's check).
    with pytest.raises(pw.WorkflowScheduleError, match=message):
        operations.validate_schedule(name=name, workflow=workflow, **kwargs)


def test_a_declaration_takes_the_workflow_function_and_runs_its_input_through_its_serializer(
        declared):
    from tests.unit.workflows_schedules import sched_typed

    definition = declared("typed", sched_typed, every="1min", input={"n": "3"})
    assert definition.workflow == "sched_typed" and definition.input == {"n": 3}
    with fake_clock(START) as clock:
        run_scheduler()
        clock.advance("1min")
    (tick,) = ticks_of("typed")
    assert tick.run.input == {"n": 3} and tick.run.output == 3


# --- overlap -----------------------------------------------------------------------------


def hold_schedule(declared, overlap):
    declared("held", "sched_hold", every="1min", overlap=overlap)


@contextmanager
def held_for(declared, overlap, minutes):
    """A schedule of a run that waits until resumed, ticked ``minutes`` times: the
    fake clock and the ticks."""
    hold_schedule(declared, overlap)
    with fake_clock(START) as clock:
        run_scheduler()
        clock.advance(f"{minutes}min")
        yield clock, ticks_of("held")


def test_overlap_skip_records_a_skipped_tick_while_the_previous_run_lives(declared):
    with held_for(declared, "skip", 3) as (clock, ticks):
        assert [t.status for t in ticks] == ["started", "skipped", "skipped"]
        first = ticks[0].run
        assert first.status == "suspended"
        assert f"the previous run {first.pk} is still suspended" in ticks[1].detail
        pw.resume_run(first.pk)  # it ends: the next tick starts a run again
        clock.advance("1min")
    assert [t.status for t in ticks_of("held")][-1] == "started"
    assert WorkflowRun.objects.filter(schedule__name="held").count() == 2


def test_overlap_buffer_one_keeps_one_tick_waiting_and_starts_it_when_the_previous_ends(
        declared):
    with held_for(declared, "buffer_one", 3) as (_, ticks):
        assert [t.status for t in ticks] == ["started", "buffered", "skipped"]
        buffered = ticks[1].run
        assert buffered.status == "scheduled" and buffered.start_at is None
        assert "already buffered" in ticks[2].detail and ticks[2].run is None
        pw.resume_run(ticks[0].run.pk)
        run_scheduler()  # the previous run ended: the buffered one starts
        buffered.refresh_from_db()
        assert buffered.status == "suspended"
        assert buffered.scheduled_at == ticks[1].tick_at


def test_overlap_allow_starts_every_tick(declared):
    with held_for(declared, "allow", 3) as (_, ticks):
        assert [t.status for t in ticks] == ["started"] * 3
        assert [t.run.status for t in ticks] == ["suspended"] * 3


def test_overlap_cancel_previous_cancels_the_live_run_and_starts_the_new_one(declared):
    with held_for(declared, "cancel_previous", 2) as (_, ticks):
        first, second = ticks
    assert (first.status, second.status) == ("started", "started")
    first.run.refresh_from_db()
    assert first.run.status == "cancelled"
    assert "overlap cancel_previous" in first.run.error["message"]
    assert f"cancelled run {first.run.pk}" in second.detail
    assert second.run.status == "suspended"


def test_a_manual_trigger_obeys_the_overlap_policy_and_records_its_tick(declared, users):
    hold_schedule(declared, "skip")
    with fake_clock(T0 + timedelta(seconds=10)):
        run_scheduler()
        started = operations.trigger_schedule("held", actor=users["staff"])
        skipped = operations.trigger_schedule("held")
    assert (started.status, started.trigger) == ("started", "manual")
    assert started.run.wire["trigger"] == "manual"
    assert started.run.wire["user"] == users["staff"].pk
    assert (skipped.status, skipped.trigger, skipped.run) == ("skipped", "manual", None)
    assert "still suspended" in skipped.detail
    assert len(ticks_of("held")) == 2


def test_a_backfill_obeys_the_overlap_policy_and_records_every_tick(declared):
    hold_schedule(declared, "buffer_one")
    with fake_clock(START) as clock:
        run_scheduler()
        clock.sleep(3600)
        ticks = operations.backfill_schedule("held", T0 - timedelta(minutes=4),
                                             T0 - timedelta(minutes=1))
        assert [(t.status, t.trigger) for t in ticks] == [
            ("started", "backfill"), ("buffered", "backfill"), ("skipped", "backfill"),
            ("skipped", "backfill")]
        assert [t.tick_at for t in ticks] == [T0 - timedelta(minutes=m) for m in (4, 3, 2, 1)]
        # Ticks that have a row are not fired again.
        assert operations.backfill_schedule("held", T0 - timedelta(minutes=4),
                                            T0 - timedelta(minutes=4)) == []
        with pytest.raises(pw.WorkflowScheduleError, match="is before its start"):
            operations.backfill_schedule("held", T0, T0 - timedelta(minutes=1))
        with pytest.raises(pw.WorkflowScheduleError, match="in the future"):
            operations.backfill_schedule("held", T0, clock.now() + timedelta(hours=1))
        with pytest.raises(pw.WorkflowScheduleError, match="the limit is 1000") as caught:
            operations.backfill_schedule("held", T0 - timedelta(days=30), T0)
        assert caught.value.field == "end"


def test_an_unknown_schedule_is_not_found():
    for call in (operations.trigger_schedule, operations.pause_schedule,
                 operations.resume_schedule, operations.get_schedule):
        with pytest.raises(pw.WorkflowScheduleError, match="no schedule is named 'nope'") \
                as caught:
            call("nope")
        assert (caught.value.code, caught.value.http_status) == ("SCHEDULE_NOT_FOUND", 404)


# --- catch-up ----------------------------------------------------------------------------


def test_after_an_outage_ticks_within_catchup_start_in_order_and_older_ones_are_missed(
        declared):
    declared("minutely", "sched_echo", every="1min", catchup="5min", overlap="allow")
    with fake_clock(START) as clock:
        run_scheduler()
        clock.advance("1min")  # 12:01 started
        clock.sleep(10 * 60)  # every scheduler stopped for 10 ticks (12:02 .. 12:11)
        written = run_scheduler()  # at 12:11:30
    # Late by at most catchup + 1 min (6 min: from 12:05:30 on) start, in order.
    assert [(t.tick_at.strftime("%H:%M"), t.status) for t in written] == [
        ("12:02", "missed"), ("12:03", "missed"), ("12:04", "missed"),
        ("12:05", "missed"), ("12:06", "started"), ("12:07", "started"),
        ("12:08", "started"), ("12:09", "started"), ("12:10", "started"),
        ("12:11", "started")]
    assert "catch-up" in written[0].detail and written[0].run is None
    assert all(t.missed_count == 1 for t in written[:4])
    assert {t.trigger for t in written[4:9]} == {"catchup"} and written[9].trigger == "cron"
    runs = [WorkflowRun.objects.get(pk=t.run_id) for t in written[4:]]
    assert all(r.status == "completed" for r in runs)
    # Started in tick order.
    assert [r.output["scheduled_at"] for r in runs] == [t.tick_at.isoformat()
                                                         for t in written[4:]]


def test_past_a_hundred_missed_ticks_the_rest_of_the_gap_is_one_row(declared):
    declared("secondly", "sched_echo", every="1s")
    with fake_clock(START) as clock:
        run_scheduler()
        clock.sleep(3600)
        run_scheduler()
    ticks = ticks_of("secondly")
    missed = [t for t in ticks if t.status == "missed"]
    assert len(missed) == 101
    assert all(t.missed_count == 1 and t.missed_until is None for t in missed[:100])
    gap = missed[100]
    # START itself is a tick (fired at the sync's pass); 100 rows, then the gap's row.
    assert missed[99].tick_at == START + timedelta(seconds=100)
    assert gap.tick_at == START + timedelta(seconds=101)
    # An hour later, the ticks of the last minute (3540 .. 3600 s) are still written as
    # started or skipped (skip: the first run has not run yet), 61 of them.
    assert gap.missed_until == START + timedelta(seconds=3539)
    assert gap.missed_count == 3539 - 101 + 1
    assert len([t for t in ticks if t.status != "missed"]) == 1 + 61
    assert sum(t.missed_count for t in missed) + 1 + 61 == 3601


# --- delayed starts ----------------------------------------------------------------------


def test_a_delayed_start_is_scheduled_then_started_by_the_time_keeper():
    with run_inline(), fake_clock(T0) as clock:
        run = pw.start_workflow("sched_echo", {"a": 1}, delay="10min")
        assert run.status == "scheduled" and run.start_at == T0 + timedelta(minutes=10)
        assert pw.get_run_status(run.pk)["status"] == "scheduled"
        clock.advance("9min")
        run.refresh_from_db()
        assert run.status == "scheduled"
        clock.advance("1min")
        run.refresh_from_db()
    assert run.status == "completed" and run.output["scheduled_at"] is None


def test_start_at_in_the_past_starts_at_once_and_bad_values_are_refused():
    with run_inline(), fake_clock(T0):
        assert pw.start_workflow("sched_echo", {}, start_at=T0).status == "completed"
        later = pw.start_workflow("sched_echo", {}, start_at=T0 + timedelta(hours=1))
        assert later.status == "scheduled"
        for kwargs, message in [
            ({"start_at": datetime(2026, 1, 1)}, "aware datetime"),
            ({"start_at": "tomorrow"}, "aware datetime"),
            ({"delay": "soon"}, "invalid delay"),
            ({"delay": "1s", "start_at": T0}, "not both"),
        ]:
            with pytest.raises(pw.WorkflowInputError, match=message):
                pw.start_workflow("sched_echo", {}, **kwargs)
    assert WorkflowRun.objects.count() == 2


def test_a_scheduled_run_cancelled_before_its_time_never_starts():
    with run_inline(), fake_clock(T0) as clock:
        run = pw.start_workflow("sched_echo", {}, delay=60)
        pw.cancel_run(run.pk, reason="not needed")
        clock.advance("5min")
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
    assert not run.steps.exists()


# --- sync --------------------------------------------------------------------------------


def test_sync_adds_changes_and_removes_code_schedules_and_never_touches_admin_ones():
    admin = WorkflowSchedule.objects.create(
        name="from_admin", workflow="sched_echo", every=3600, source="admin",
        next_fire_at=T0 + timedelta(hours=1))
    clash = WorkflowSchedule.objects.create(
        name="clash", workflow="sched_echo", cron="0 3 * * *", source="admin")
    with registry.isolated(), fake_clock(T0):
        registry._schedules = {}  # none but the test's (the demo app declares one)
        pw.schedule("one", "sched_echo", every="1h")
        pw.schedule("two", "sched_echo", cron="0 9 * * 1", tz="Europe/Paris")
        pw.schedule("clash", "sched_echo", every="1min")
        assert operations.sync_schedules() == {
            "added": ["one", "two"], "changed": [], "removed": [], "conflicts": ["clash"]}
        one = WorkflowSchedule.objects.get(name="one")
        assert (one.source, one.every, one.next_fire_at) == ("code", 3600, T0)
        two = WorkflowSchedule.objects.get(name="two")
        assert two.next_fire_at == utc(2026, 6, 8, 7)  # Monday 09:00 CEST
        operations.pause_schedule("two")  # an operator's pause survives a sync
        registry.unregister_schedule("one")
        pw.schedule("two", "sched_echo", cron="0 10 * * 1", tz="Europe/Paris",
                    input={"v": 2})
        assert operations.sync_schedules() == {
            "added": [], "changed": ["two"], "removed": ["one"], "conflicts": ["clash"]}
        two.refresh_from_db()
        assert (two.cron, two.input, two.paused) == ("0 10 * * 1", {"v": 2}, True)
        assert two.next_fire_at == utc(2026, 6, 8, 8)
        assert operations.sync_schedules()["changed"] == []
    assert not WorkflowSchedule.objects.filter(name="one").exists()
    for row, kept in ((admin, admin), (clash, clash)):
        row.refresh_from_db()
        assert (row.source, row.every, row.cron) == ("admin", kept.every, kept.cron)


def test_pause_and_resume(declared):
    declared("minutely", "sched_echo", every="1min")
    with fake_clock(START) as clock:
        run_scheduler()
        operations.pause_schedule("minutely")
        clock.advance("5min")
        assert ticks_of("minutely") == []
        assert operations.next_fire_times("minutely", 2) == [
            T0 + timedelta(minutes=6), T0 + timedelta(minutes=7)]
        schedule = operations.resume_schedule("minutely")
        assert schedule.next_fire_at == T0 + timedelta(minutes=6)
        clock.advance("1min")
    # The ticks of the pause are not owed: the first tick is the one at resume.
    assert [t.tick_at for t in ticks_of("minutely")] == [T0 + timedelta(minutes=6)]


def test_a_schedule_ends_at_its_end_at(declared):
    declared("short", "sched_echo", every="1min", start_at=T0, end_at=T0 + timedelta(minutes=2))
    with fake_clock(T0 - timedelta(minutes=1)) as clock:
        run_scheduler()
        clock.advance("10min")
    assert [t.tick_at for t in ticks_of("short")] == [T0 + timedelta(minutes=m)
                                                      for m in range(3)]
    assert WorkflowSchedule.objects.get(name="short").next_fire_at is None
    assert operations.next_fire_times("short") == []


def test_a_tick_whose_workflow_is_gone_is_skipped_saying_why(declared):
    declared("orphan", "sched_echo", every="1min")
    with fake_clock(START) as clock:
        run_scheduler()
        WorkflowSchedule.objects.filter(name="orphan").update(workflow="gone_workflow")
        registry.unregister_schedule("orphan")
        WorkflowSchedule.objects.filter(name="orphan").update(source="admin")
        clock.advance("1min")
    (tick,) = ticks_of("orphan")
    assert tick.status == "skipped" and tick.run is None
    assert "no workflow is registered as 'gone_workflow'" in tick.detail


def test_scheduled_at_is_the_tick_time_and_none_otherwise(declared):
    declared("minutely", "sched_echo", every="1min")
    with fake_clock(T0 + timedelta(seconds=30)) as clock:
        run_scheduler()
        clock.advance("1min")
        plain = pw.start_workflow("sched_echo", {})
    (tick,) = ticks_of("minutely")
    assert tick.run.scheduled_at == T0 + timedelta(minutes=1)
    assert tick.run.output["scheduled_at"] == "2026-06-01T12:01:00+00:00"
    assert tick.run.idempotency_key == "schedule:minutely:2026-06-01T12:01:00+00:00"
    assert plain.output["scheduled_at"] is None


# --- the cost of a pass ----------------------------------------------------------------


def _pass_queries(now, *, start=None):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from pikku_workflows.runtime.scheduler import scheduler_pass

    with CaptureQueriesContext(connection) as queries, run_inline():
        ticks = scheduler_pass(now=now, start=start)
    return len(queries), ticks


def _schedules(count, *, first=0, due_at, paused=False):
    WorkflowSchedule.objects.bulk_create(
        WorkflowSchedule(name=f"s{first + i}", workflow="sched_echo", every=60,
                         source="admin", next_fire_at=due_at, paused=paused)
        for i in range(count))


def test_a_pass_costs_the_same_whatever_the_number_of_schedules_not_due():
    with fake_clock(T0):
        _schedules(1, first=0, due_at=T0)
        _pass_queries(T0)  # warm: the workflow's version row, the executor
        one, ticks = _pass_queries(T0 + timedelta(minutes=1))
        assert len(ticks) == 1
        WorkflowSchedule.objects.filter(name="s0").update(
            next_fire_at=T0 + timedelta(minutes=2))
        _schedules(300, first=1, due_at=T0 + timedelta(hours=1))
        _schedules(300, first=301, due_at=T0 - timedelta(hours=1), paused=True)
        again, ticks = _pass_queries(T0 + timedelta(minutes=2))
    # The same queries for one due tick among 600 schedules as among one.
    assert len(ticks) == 1 and again == one


def test_a_pass_writes_its_due_ticks_together():
    handed = []
    with fake_clock(T0):
        _schedules(1, first=0, due_at=T0)
        _pass_queries(T0)  # warm: the workflow's version row, the executor
        WorkflowSchedule.objects.all().update(next_fire_at=T0 + timedelta(hours=1))
        _, none = _pass_queries(T0 + timedelta(minutes=1))
        _schedules(5, first=1, due_at=T0 + timedelta(minutes=1))
        five, ticks = _pass_queries(T0 + timedelta(minutes=1), start=handed.append)
        WorkflowSchedule.objects.all().update(next_fire_at=T0 + timedelta(hours=1))
        _schedules(10, first=6, due_at=T0 + timedelta(minutes=2))
        ten, more = _pass_queries(T0 + timedelta(minutes=2), start=handed.append)
    assert (len(none), len(ticks), len(more)) == (0, 5, 10)
    assert len(handed) == 15 and all(run.status == "running" for run in handed)
    # One transaction writes a pass's due ticks and their runs: ten cost what five do.
    assert ten == five
    assert WorkflowScheduleTick.objects.filter(status="started").count() == 16
    assert WorkflowRun.objects.filter(schedule__isnull=False).count() == 16


def test_a_tick_already_written_is_passed_over_not_written_again():
    with fake_clock(T0):
        _schedules(3, first=0, due_at=T0)
        # s1's tick is already written (as by a manual trigger at that very instant).
        WorkflowScheduleTick.objects.create(
            schedule=WorkflowSchedule.objects.get(name="s1"), tick_at=T0,
            status="skipped", trigger="manual", created_at=T0)
        _, ticks = _pass_queries(T0, start=lambda run: None)
    assert sorted(tick.schedule.name for tick in ticks) == ["s0", "s2"]
    s1 = WorkflowSchedule.objects.get(name="s1")
    assert s1.next_fire_at == T0 + timedelta(minutes=1)  # not stuck on the written tick
    assert list(s1.ticks.values_list("trigger", flat=True)) == ["manual"]
    assert WorkflowRun.objects.filter(schedule=s1).count() == 0


def test_a_schedule_that_cannot_fire_holds_up_no_other(caplog):
    with fake_clock(T0):
        _schedules(3, first=0, due_at=T0)
        # A row no declaration could make (a cron that does not parse) fails the pass's
        # batch; each schedule is then fired alone.
        WorkflowSchedule.objects.filter(name="s1").update(every=None, cron="not a cron")
        _, ticks = _pass_queries(T0, start=lambda run: None)
    assert sorted(tick.schedule.name for tick in ticks) == ["s0", "s2"]
    assert WorkflowRun.objects.filter(schedule__isnull=False).count() == 2
    s1 = WorkflowSchedule.objects.get(name="s1").pk
    assert f"scheduler: schedule {s1} failed this pass" in caplog.text


def test_a_second_scheduler_at_the_same_moment_writes_nothing_again(declared):
    from pikku_workflows.runtime.scheduler import scheduler_pass

    declared("minutely", "sched_echo", every="1min")
    with fake_clock(START):
        run_scheduler()
        at = T0 + timedelta(minutes=1)
        assert len(scheduler_pass(now=at)) == 1
        assert scheduler_pass(now=at) == []  # the schedule's next tick moved on
        # Even handed a stale due schedule, the tick's row and run key admit no second.
        WorkflowSchedule.objects.filter(name="minutely").update(next_fire_at=at)
        assert scheduler_pass(now=at) == []
    assert len(ticks_of("minutely")) == 1
    assert WorkflowRun.objects.filter(schedule__name="minutely").count() == 1


def test_cancel_previous_ends_nothing_when_the_new_run_cannot_start(declared):
    hold_schedule(declared, "cancel_previous")
    with fake_clock(START) as clock:
        run_scheduler()
        clock.advance("1min")
        WorkflowSchedule.objects.filter(name="held").update(
            workflow="gone_workflow", source="admin")
        registry.unregister_schedule("held")
        clock.advance("1min")
    first, second = ticks_of("held")
    assert second.status == "skipped" and second.run is None
    assert "no workflow is registered as 'gone_workflow'" in second.detail
    first.run.refresh_from_db()
    assert first.run.status == "suspended"  # still live: nothing replaced it


def test_a_buffered_run_whose_schedule_is_deleted_starts_instead_of_waiting_forever(declared):
    hold_schedule(declared, "buffer_one")
    with fake_clock(START) as clock:
        run_scheduler()
        clock.advance("2min")
        _, buffered = ticks_of("held")
        assert buffered.status == "buffered"
        registry.unregister_schedule("held")
        run_scheduler()  # the sync removes the code schedule; its runs stay
    assert not WorkflowSchedule.objects.filter(name="held").exists()
    run = WorkflowRun.objects.get(pk=buffered.run_id)
    assert run.status == "suspended" and run.schedule is None


def test_an_admin_schedule_saved_from_its_validated_fields_fires_and_sync_leaves_it():
    with run_inline(), fake_clock(START) as clock:
        definition = operations.validate_schedule(
            name="made_in_admin", workflow="sched_typed", every="1min", input={"n": "7"})
        WorkflowSchedule.objects.create(**operations.schedule_fields(definition),
                                        source="admin")
        clock.advance("1min")
        run_scheduler()  # its sync removes code schedules only
    (tick,) = ticks_of("made_in_admin")
    assert tick.tick_at == T0 + timedelta(minutes=1) and tick.run.input == {"n": 7}
    assert WorkflowSchedule.objects.get(name="made_in_admin").next_fire_at == \
        T0 + timedelta(minutes=2)


@pytest.mark.django_db(transaction=True)
def test_the_time_keeper_hands_an_inline_run_to_its_pool_and_never_waits_out_its_sleep():
    import time

    from django.utils import timezone

    from pikku_workflows.runtime.scheduler import TimeKeeper

    run = pw.start_workflow("sched_naps", "1s", inline=True,
                            start_at=timezone.now() + timedelta(milliseconds=200))
    assert run.status == "scheduled"
    time.sleep(0.3)  # its start time passes on the real clock the time keeper reads
    keeper = TimeKeeper(0.5, threads=1)
    keeper.run_once()
    # The pass started it and went on: the run sleeps on the pool's thread meanwhile
    # (were the loop to run it, it would have come back only once the run completed).
    run.refresh_from_db()
    assert run.status == "running"
    keeper.stop()  # lets the pool's run finish
    run.refresh_from_db()
    assert run.status == "completed"


def test_the_time_keeper_waits_until_the_next_tick_within_its_interval():
    from pikku_workflows.runtime.scheduler import MIN_WAIT, TimeKeeper

    keeper = TimeKeeper(0.5, threads=1)
    try:
        with fake_clock(T0):
            assert keeper.next_wait() == 0.5  # nothing waits: the interval
            _schedules(1, first=0, due_at=T0 + timedelta(hours=1))
            _schedules(1, first=1, due_at=T0, paused=True)  # a paused one is not awaited
            assert keeper.next_wait() == 0.5
            _schedules(1, first=2, due_at=T0 + timedelta(milliseconds=200))
            assert keeper.next_wait() == pytest.approx(0.2)
            # A tick already due (a busy pass left it): the shortest pause, not none.
            _schedules(1, first=3, due_at=T0 - timedelta(seconds=1))
            assert keeper.next_wait() == MIN_WAIT
    finally:
        keeper.stop()


def test_a_ticks_only_pass_writes_the_due_ticks_and_leaves_the_rest_to_the_whole_pass():
    from pikku_workflows.runtime.scheduler import scheduler_pass

    with fake_clock(T0), run_inline():
        _schedules(1, first=0, due_at=T0)
        delayed = pw.start_workflow("sched_echo", 1, start_at=T0 + timedelta(seconds=1))
        later = T0 + timedelta(seconds=2)
        [tick] = scheduler_pass(now=later, ticks_only=True)
        assert tick.schedule.name == "s0" and tick.run is not None
        assert WorkflowRun.objects.get(pk=delayed.pk).status == "scheduled"
        scheduler_pass(now=later)
        assert WorkflowRun.objects.get(pk=delayed.pk).status == "completed"
