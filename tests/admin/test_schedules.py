"""The console's schedules: the list and a schedule's page render and say what is true (the
next fire times are ``next_fire_times``', ticks with their status and run), each action
and its permission (and the admin log), the form for schedules made in the admin and its
errors (nothing written), code schedules read-only but for ``paused``, and a run started
by a schedule naming it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows import operations
from pikku_workflows.admin.schedules import local
from pikku_workflows.engine.clock import clock as engine_clock
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.testing import fake_clock
from tests.admin.test_console import staff_client, url

pytestmark = pytest.mark.django_db


def now():
    return engine_clock().now()


@pytest.fixture
def clock():
    with fake_clock(datetime(2030, 1, 7, 9, 0, 30, tzinfo=UTC)) as fake:
        yield fake


def make_schedule(name="every-minute", workflow="sequential", source="admin", **fields):
    fields.setdefault("input", {"x": 1})
    if "cron" not in fields:
        fields.setdefault("every", 60.0)
    return WorkflowSchedule.objects.create(name=name, workflow=workflow, source=source,
                                           next_fire_at=now() + timedelta(seconds=30),
                                           **fields)


def form_data(**fields):
    data = {"name": "from-admin", "workflow": "sequential", "cron": "", "every": "5min",
            "tz": "UTC", "input": '{"x": 1}', "overlap": "skip", "catchup": "0s",
            "start_at_0": "", "start_at_1": "", "end_at_0": "", "end_at_1": ""}
    data.update(fields)
    return data


def test_the_list_says_what_is_true(admin_client, clock):
    schedule = make_schedule(name="paris", every=None, cron="30 2 * * *", tz="Europe/Paris")
    operations.trigger_schedule("paris")
    page = admin_client.get(url("workflowschedule_changelist"))
    assert page.status_code == 200
    text = page.content.decode()
    expected = operations.next_fire_times(schedule, count=5)
    assert len(expected) == 5
    for at in expected:
        assert f'<time datetime="{at.isoformat()}">{local(at)}</time>' in text
    assert "cron 30 2 * * *" in text and "Europe/Paris" in text
    assert 'data-tick-status="started"' in text


def test_the_list_shows_times_in_the_users_time_zone(admin_client, clock, settings):
    schedule = make_schedule(every=3600.0)
    first = operations.next_fire_times(schedule, count=1)[0]
    with timezone.override("America/New_York"):
        assert local(first).endswith("EST")
        assert local(first).startswith(first.astimezone(
            timezone.get_current_timezone()).strftime("%Y-%m-%d %H:%M"))


def test_a_schedules_page_lists_its_ticks_with_their_runs(admin_client, clock):
    make_schedule(name="gated", workflow="two_gates", overlap="skip", input={})
    started = operations.trigger_schedule("gated")
    clock.advance("1s")
    skipped = operations.trigger_schedule("gated")
    assert (started.status, skipped.status) == ("started", "skipped")
    schedule = WorkflowSchedule.objects.get(name="gated")
    WorkflowScheduleTick.objects.create(
        schedule=schedule, tick_at=now() - timedelta(days=1), status="missed",
        missed_until=now() - timedelta(hours=1), missed_count=140)
    page = admin_client.get(url("workflowschedule_change", schedule.pk))
    assert page.status_code == 200
    text = page.content.decode()
    rows = re.findall(r'<tr data-tick="[^"]+" data-tick-status="(\w+)">', text)
    assert rows == ["skipped", "started", "missed"]  # newest first
    assert f'data-tick-run="{started.run_id}"' in text
    assert url("workflowrun_change", started.run_id) in text
    assert "140 ticks missed until" in text
    for at in operations.next_fire_times(schedule, count=5):
        assert local(at) in text
    # The run names its schedule and tick.
    run_page = admin_client.get(url("workflowrun_change", started.run_id)).content.decode()
    assert 'data-schedule="gated"' in run_page
    assert url("workflowschedule_change", schedule.pk) in run_page


def test_every_action_needs_change_workflowschedule_and_is_logged(django_user_model, clock):
    schedule = make_schedule()
    nobody, _ = staff_client(django_user_model, "nobody")  # staff status alone grants nothing
    assert nobody.get(url("workflowschedule_changelist")).status_code == 403
    assert nobody.get(url("workflowschedule_change", schedule.pk)).status_code == 403
    assert nobody.post(url("workflowschedule_trigger", schedule.pk)).status_code == 403
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowschedule")
    changer, changer_user = staff_client(django_user_model, "changer",
                                         "view_workflowschedule", "change_workflowschedule")
    page = viewer.get(url("workflowschedule_change", schedule.pk))
    assert page.status_code == 200 and "pk-schedule-pause" not in page.content.decode()
    for verb in ("pause", "resume", "trigger", "backfill"):
        assert viewer.get(url(f"workflowschedule_{verb}", schedule.pk)).status_code == 403
        assert viewer.post(url(f"workflowschedule_{verb}", schedule.pk)).status_code == 403
    assert not WorkflowSchedule.objects.get(pk=schedule.pk).paused
    assert not schedule.ticks.exists()
    # The changer: a confirmation, then the action, then the admin log.
    assert "pk-schedule-pause" in changer.get(
        url("workflowschedule_change", schedule.pk)).content.decode()
    confirm = changer.get(url("workflowschedule_pause", schedule.pk))
    assert confirm.status_code == 200 and not WorkflowSchedule.objects.get(
        pk=schedule.pk).paused
    done = changer.post(url("workflowschedule_pause", schedule.pk))
    assert done.status_code == 302 and WorkflowSchedule.objects.get(pk=schedule.pk).paused
    changer.post(url("workflowschedule_resume", schedule.pk))
    assert not WorkflowSchedule.objects.get(pk=schedule.pk).paused
    changer.post(url("workflowschedule_trigger", schedule.pk))
    tick = schedule.ticks.get()
    assert tick.status == "started" and tick.run.status == "completed"
    assert tick.run.wire == {"type": "schedule", "schedule": "every-minute",
                             "trigger": "manual", "user": changer_user.pk}
    logged = list(LogEntry.objects.filter(object_id=str(schedule.pk)).order_by("pk")
                  .values_list("user_id", "change_message"))
    assert [message.split(" ")[2] for _, message in logged] == [
        "paused.", "resumed.", "triggered:"]
    assert {user for user, _ in logged} == {changer_user.pk}


def test_bulk_actions_obey_their_permission(django_user_model, admin_client, clock):
    one, two = make_schedule(name="one"), make_schedule(name="two")
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowschedule")
    listing = viewer.get(url("workflowschedule_changelist")).content.decode()
    assert "pause_schedules" not in listing
    viewer.post(url("workflowschedule_changelist"), {
        "action": "pause_schedules", "_selected_action": [one.pk, two.pk]})
    assert not WorkflowSchedule.objects.filter(paused=True).exists()
    admin_client.post(url("workflowschedule_changelist"), {
        "action": "pause_schedules", "_selected_action": [one.pk, two.pk]})
    assert WorkflowSchedule.objects.filter(paused=True).count() == 2
    admin_client.post(url("workflowschedule_changelist"), {
        "action": "trigger_schedules", "_selected_action": [one.pk]})
    assert one.ticks.get().status == "started" and not two.ticks.exists()


def test_backfill_from_to(admin_client, clock):
    schedule = make_schedule(name="hourly", every=3600.0, overlap="allow")
    page = admin_client.get(url("workflowschedule_backfill", schedule.pk))
    assert page.status_code == 200 and 'name="start"' in page.content.decode()
    refused = admin_client.post(url("workflowschedule_backfill", schedule.pk), {
        "start": "2030-01-07 06:00:00", "end": "2030-01-07 03:00:00"})
    assert refused.status_code == 200 and "before" in refused.content.decode()
    assert not schedule.ticks.exists()
    done = admin_client.post(url("workflowschedule_backfill", schedule.pk), {
        "start": "2030-01-07 03:00:00", "end": "2030-01-07 06:00:00"})
    assert done.status_code == 302
    ticks = list(schedule.ticks.order_by("tick_at").values_list("tick_at", "status",
                                                                "trigger"))
    assert [at.hour for at, _, _ in ticks] == [3, 4, 5, 6]
    assert {(status, trigger) for _, status, trigger in ticks} == {("started", "backfill")}
    assert LogEntry.objects.filter(object_id=str(schedule.pk),
                                   change_message__contains="4 ticks").exists()


def test_creating_a_schedule_needs_add_and_is_validated(django_user_model, clock):
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowschedule")
    assert viewer.get(url("workflowschedule_add")).status_code == 403
    adder, _ = staff_client(django_user_model, "adder", "view_workflowschedule",
                            "add_workflowschedule")
    assert adder.get(url("workflowschedule_add")).status_code == 200
    bad = {
        "cron": ({"cron": "61 * * * *", "every": ""}, "cron"),
        "tz": ({"tz": "Mars/Olympus"}, "tz"),
        "both": ({"cron": "0 3 * * *", "every": "5min"}, None),
        "neither": ({"cron": "", "every": ""}, None),
        "short": ({"every": "500ms"}, "every"),
        "workflow": ({"workflow": "no_such_workflow"}, "workflow"),
        "window": ({"start_at_0": "2030-02-01", "start_at_1": "00:00:00",
                    "end_at_0": "2030-01-01", "end_at_1": "00:00:00"}, "end_at"),
    }
    for case, (fields, field) in bad.items():
        answer = adder.post(url("workflowschedule_add"), form_data(**fields))
        assert answer.status_code == 200, case  # the form again, with its errors
        errors = answer.context["adminform"].form.errors
        assert errors, case
        if field is not None:
            assert field in errors or "__all__" in errors, (case, errors)
    assert not WorkflowSchedule.objects.exists()  # nothing written
    made = adder.post(url("workflowschedule_add"), form_data())
    assert made.status_code == 302
    schedule = WorkflowSchedule.objects.get(name="from-admin")
    assert (schedule.source, schedule.every, schedule.input) == ("admin", 300.0, {"x": 1})


def test_code_schedules_are_read_only_but_for_paused(admin_client, clock):
    schedule = make_schedule(name="declared", source="code")
    page = admin_client.get(url("workflowschedule_change", schedule.pk)).content.decode()
    assert 'name="paused"' in page
    assert 'name="workflow"' not in page and 'name="every"' not in page
    assert "declared in code" in page
    admin_client.post(url("workflowschedule_change", schedule.pk),
                      {"paused": "on", "workflow": "two_gates"})
    schedule.refresh_from_db()
    assert schedule.paused and schedule.workflow == "sequential"
    assert admin_client.get(url("workflowschedule_delete", schedule.pk)).status_code == 403


def test_an_admin_schedule_is_edited_with_its_checks(admin_client, clock):
    schedule = make_schedule(name="mine")
    page = admin_client.get(url("workflowschedule_change", schedule.pk))
    assert page.status_code == 200 and 'name="every"' in page.content.decode()
    refused = admin_client.post(url("workflowschedule_change", schedule.pk),
                                form_data(name="mine", tz="Nowhere/Land"))
    assert refused.status_code == 200
    assert WorkflowSchedule.objects.get(pk=schedule.pk).tz == "UTC"
    admin_client.post(url("workflowschedule_change", schedule.pk),
                      form_data(name="mine", every="", cron="0 3 * * *", tz="Europe/Paris"))
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.every, schedule.tz) == ("0 3 * * *", None, "Europe/Paris")


def test_an_edit_never_writes_back_a_tick_a_scheduler_fired_meanwhile(admin_client, clock):
    from django.db.models.signals import pre_save

    schedule = make_schedule(name="mine", every=300.0)
    fired_to = schedule.next_fire_at + timedelta(minutes=5)

    def scheduler_fires_meanwhile(sender, instance, **kwargs):
        # Between the admin's read of the row and its write, a pass fires the tick.
        WorkflowSchedule.objects.filter(pk=instance.pk).update(next_fire_at=fired_to)

    pre_save.connect(scheduler_fires_meanwhile, sender=WorkflowSchedule)
    try:
        answer = admin_client.post(url("workflowschedule_change", schedule.pk),
                                   form_data(name="mine", input='{"x": 2}'))
    finally:
        pre_save.disconnect(scheduler_fires_meanwhile, sender=WorkflowSchedule)
    assert answer.status_code == 302
    schedule.refresh_from_db()
    assert schedule.input == {"x": 2} and schedule.next_fire_at == fired_to


def test_a_scheduled_run_says_when_it_starts(admin_client, clock):
    run = pw.start_workflow("sequential", {"x": 1}, delay="10min")
    page = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    assert 'data-run-status="scheduled"' in page and "pk-starts-at" in page
    assert WorkflowRun.objects.get(pk=run.pk).status == "scheduled"


def test_the_list_reads_its_rows_in_queries_that_do_not_grow_with_them(admin_client, clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(url("workflowschedule_changelist")).status_code == 200
        return len(captured.captured_queries)

    for i in range(2):
        make_schedule(name=f"s{i}")
        operations.trigger_schedule(f"s{i}")
    queries_for_list()  # the first request reads the user's permissions too
    few = queries_for_list()
    for i in range(2, 12):
        make_schedule(name=f"s{i}")
        operations.trigger_schedule(f"s{i}")
    assert queries_for_list() == few
