"""``pikku_schedules`` (list, trigger, pause, resume, backfill) and ``pikku_start --delay`` /
``--start-at``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock, run_inline, run_scheduler

pytestmark = pytest.mark.django_db

START = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def schedules(*args):
    out = StringIO()
    call_command("pikku_schedules", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def two_schedules():
    with registry.isolated(), run_inline(), fake_clock(START) as clock:
        pw.schedule("nightly", "sched_echo", cron="30 2 * * *", tz="Europe/Paris",
                    overlap="allow", catchup="1h")
        pw.schedule("held", "sched_hold", every="1min")
        run_scheduler()
        yield clock


def test_the_list_shows_cadence_next_five_fire_times_and_the_last_tick(two_schedules):
    two_schedules.advance("1min")
    text = schedules()
    assert "held: sched_hold, every 60s (code, overlap skip)" in text
    assert ("nightly: sched_echo, cron '30 2 * * *' Europe/Paris (code, overlap allow, "
            "catchup 3600s)") in text
    assert ("  next: 2026-06-02T00:30:00+00:00, 2026-06-03T00:30:00+00:00, "
            "2026-06-04T00:30:00+00:00, 2026-06-05T00:30:00+00:00, "
            "2026-06-06T00:30:00+00:00") in text
    tick = WorkflowScheduleTick.objects.get(schedule__name="held")
    assert f"  last: 2026-06-01T12:01:00+00:00 cron started run {tick.run_id}" in text
    assert "  next: 2026-06-01T12:02:00+00:00, 2026-06-01T12:03:00+00:00," in text


def test_trigger_pause_resume_and_backfill(two_schedules):
    text = schedules("--trigger", "held")
    run = WorkflowRun.objects.get(schedule__name="held")
    assert f"manual started run {run.pk}" in text
    # The overlap policy applies to a manual trigger too, and says why.
    assert f"manual skipped: overlap skip: the previous run {run.pk} is still suspended" \
        in schedules("--trigger", "held")

    assert schedules("--pause", "held") == "held paused\n"
    assert WorkflowSchedule.objects.get(name="held").paused
    assert "PAUSED" in schedules()
    two_schedules.advance("3min")
    assert WorkflowScheduleTick.objects.filter(schedule__name="held").count() == 2
    assert schedules("--resume", "held") == \
        "held resumed; next tick 2026-06-01T12:04:00+00:00\n"

    two_schedules.sleep(3 * 86400)
    text = schedules("--backfill", "nightly", "2026-06-02T00:00:00+00:00",
                     "2026-06-03T12:00:00+00:00")
    assert text.splitlines()[0] == "nightly: 2 ticks backfilled"
    assert "2026-06-02T00:30:00+00:00 backfill started run" in text
    assert "2026-06-03T00:30:00+00:00 backfill started run" in text


def test_bad_names_and_dates_are_command_errors(two_schedules):
    with pytest.raises(CommandError, match="no schedule is named 'nope'"):
        schedules("--trigger", "nope")
    with pytest.raises(CommandError, match="FROM 'yesterday' is not a date"):
        schedules("--backfill", "nightly", "yesterday", "2026-06-01")
    with pytest.raises(CommandError, match="is before its start"):
        schedules("--backfill", "nightly", "2026-06-01", "2026-05-01")


def test_no_schedules():
    assert schedules() == "no schedules\n"


def test_pikku_start_with_a_delay_or_a_start_time_leaves_the_run_scheduled():
    out, err = StringIO(), StringIO()
    with run_inline(), fake_clock(START) as clock:
        call_command("pikku_start", "sched_echo", '{"x": 1}', "--delay", "10min",
                     stdout=out, stderr=err)
        run = WorkflowRun.objects.get(pk=out.getvalue().strip())
        assert run.status == "scheduled" and run.start_at == START + timedelta(minutes=10)
        assert err.getvalue().strip() == "scheduled to start at 2026-06-01T12:10:30+00:00"
        call_command("pikku_start", "sched_echo", "--start-at", "2026-06-01T14:30:00+02:00",
                     stdout=StringIO(), stderr=StringIO())
        later = WorkflowRun.objects.exclude(pk=run.pk).get()
        assert later.start_at == datetime(2026, 6, 1, 12, 30, tzinfo=UTC)
        with pytest.raises(CommandError, match="invalid delay 'soon'"):
            call_command("pikku_start", "sched_echo", "--delay", "soon", stdout=StringIO())
        with pytest.raises(CommandError, match="--start-at 'noon' is not a date"):
            call_command("pikku_start", "sched_echo", "--start-at", "noon", stdout=StringIO())
        clock.advance("10min")
    run.refresh_from_db()
    assert run.status == "completed" and run.output["data"] == {"x": 1}
    assert WorkflowRun.objects.count() == 2


def test_prune_deletes_old_ticks_without_a_run_and_keeps_those_of_kept_runs(two_schedules):
    schedules("--trigger", "held")  # started: its run is live, so it and its tick stay
    schedules("--trigger", "held")  # skipped: no run
    schedules("--pause", "held")  # hours of ticks every minute would only slow the test
    two_schedules.advance("2h")
    ticks = WorkflowScheduleTick.objects.filter(schedule__name="held")
    old_without_run = ticks.filter(tick_at__lt=START + timedelta(hours=1), run__isnull=True)
    assert old_without_run.count() >= 1
    kept = set(ticks.filter(run__isnull=False).values_list("pk", flat=True))
    out = StringIO()
    call_command("pikku_prune", "--older-than", "1h", "--dry-run", stdout=out)
    assert f"{old_without_run.count()} schedule tick(s) without a run would be deleted" \
        in out.getvalue()
    newer = ticks.filter(tick_at__gte=START + timedelta(hours=1)).count()
    call_command("pikku_prune", "--older-than", "1h", "--batch-size", "1", stdout=out)
    assert not old_without_run.exists()
    assert kept <= set(ticks.values_list("pk", flat=True))
    assert ticks.filter(tick_at__gte=START + timedelta(hours=1)).count() == newer
