"""The REST API's schedules: who sees and steers them (anonymous, no permission, view only,
change), their bodies, 404s, a trigger that obeys the overlap policy, start/'s start_at
and delay, and the schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission
from drf_spectacular.generators import SchemaGenerator

from pikku_workflows import operations
from pikku_workflows.engine.clock import clock as engine_clock
from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.testing import fake_clock
from tests.conftest import API, client_for

pytestmark = pytest.mark.django_db


def now():
    return engine_clock().now()

SCHEDULES = f"{API}schedules/"
ZONE_PARIS = ZoneInfo("Europe/Paris")


def user_with(django_user_model, name, *codenames):
    user = django_user_model.objects.create_user(name, password="pw")
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=codenames))
    return user


@pytest.fixture
def clients(django_user_model):
    return {
        "anonymous": client_for(),
        "nobody": client_for(user_with(django_user_model, "nobody")),
        "viewer": client_for(user_with(django_user_model, "viewer", "view_workflowschedule")),
        "changer": client_for(user_with(django_user_model, "changer", "view_workflowschedule",
                                        "change_workflowschedule")),
    }


def make_schedule(name="every-minute", workflow="sequential", **fields):
    fields.setdefault("every", 60.0)
    fields.setdefault("input", {"x": 1})
    return WorkflowSchedule.objects.create(name=name, workflow=workflow, source="admin",
                                           next_fire_at=now() + timedelta(seconds=60),
                                           **fields)


@pytest.fixture
def clock():
    with fake_clock(datetime(2030, 1, 7, 9, 0, 30, tzinfo=UTC)) as fake:
        yield fake


def test_reading_needs_view_workflowschedule(clients, clock):
    make_schedule()
    assert clients["anonymous"].get(SCHEDULES).status_code in (401, 403)
    assert clients["anonymous"].get(f"{SCHEDULES}every-minute/").status_code in (401, 403)
    # Signed in without the permission: nothing to see, as a run one may not see.
    nobody = clients["nobody"].get(SCHEDULES)
    assert nobody.status_code == 200 and nobody.json()["results"] == []
    hidden = clients["nobody"].get(f"{SCHEDULES}every-minute/")
    assert hidden.status_code == 404 and hidden.json()["code"] == "SCHEDULE_NOT_FOUND"
    for who in ("viewer", "changer"):
        listed = clients[who].get(SCHEDULES).json()
        assert [s["name"] for s in listed["results"]] == ["every-minute"], who
        assert clients[who].get(f"{SCHEDULES}every-minute/").status_code == 200


def test_actions_need_change_workflowschedule(clients, clock):
    make_schedule()
    for verb in ("trigger", "pause", "resume"):
        path = f"{SCHEDULES}every-minute/{verb}/"
        assert clients["anonymous"].post(path, {}, format="json").status_code in (401, 403)
        assert clients["nobody"].post(path, {}, format="json").status_code == 404
        refused = clients["viewer"].post(path, {}, format="json")
        assert refused.status_code == 403, verb
        assert "pikku_workflows.change_workflowschedule" in refused.json()["detail"]
    # Nothing happened.
    schedule = WorkflowSchedule.objects.get(name="every-minute")
    assert not schedule.paused and not schedule.ticks.exists()
    assert not WorkflowRun.objects.exists()


def test_a_schedule_and_its_recent_ticks(clients, clock):
    make_schedule(name="paris-morning", every=None, cron="0 9 * * 1-5", tz="Europe/Paris",
                  overlap="allow")
    answer = clients["viewer"].get(f"{SCHEDULES}paris-morning/")
    body = answer.json()
    schedule = WorkflowSchedule.objects.get(name="paris-morning")
    expected = [at.isoformat() for at in (
        t.astimezone(ZONE_PARIS) for t in operations.next_fire_times(schedule, count=5))]
    assert body["next_fire_times"] == expected
    assert body["next_fire_times"][0].startswith("2030-01-08T09:00:00+01:00")
    assert {key: body[key] for key in ("name", "workflow", "cron", "every", "tz", "overlap",
                                       "paused", "source", "input")} == {
        "name": "paris-morning", "workflow": "sequential", "cron": "0 9 * * 1-5",
        "every": None, "tz": "Europe/Paris", "overlap": "allow", "paused": False,
        "source": "admin", "input": {"x": 1}}
    assert body["recent_ticks"] == [] and body["last_tick"] is None
    triggered = clients["changer"].post(f"{SCHEDULES}paris-morning/trigger/", {},
                                        format="json")
    assert triggered.status_code == 200
    tick = triggered.json()
    assert tick["status"] == "started" and tick["trigger"] == "manual"
    run = WorkflowRun.objects.get(pk=tick["run"])
    assert run.schedule_id == schedule.pk and run.status == "completed"
    body = clients["viewer"].get(f"{SCHEDULES}paris-morning/").json()
    assert body["recent_ticks"] == [tick] and body["last_tick"] == tick
    listed = clients["viewer"].get(SCHEDULES).json()["results"][0]
    assert listed["last_tick"] == tick and "recent_ticks" not in listed


def test_pause_and_resume(clients, clock):
    make_schedule()
    paused = clients["changer"].post(f"{SCHEDULES}every-minute/pause/", {}, format="json")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert WorkflowSchedule.objects.get(name="every-minute").paused
    resumed = clients["changer"].post(f"{SCHEDULES}every-minute/resume/", {}, format="json")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert not WorkflowSchedule.objects.get(name="every-minute").paused
    assert resumed.json()["next_fire_times"]


def test_trigger_obeys_the_overlap_policy(clients, clock):
    make_schedule(name="gated", workflow="two_gates", overlap="skip", input={})
    first = clients["changer"].post(f"{SCHEDULES}gated/trigger/", {}, format="json").json()
    assert first["status"] == "started"
    assert WorkflowRun.objects.get(pk=first["run"]).status == "suspended"  # still live
    clock.advance("1s")
    second = clients["changer"].post(f"{SCHEDULES}gated/trigger/", {}, format="json").json()
    assert second["status"] == "skipped" and second["run"] is None
    assert second["detail"]  # says why
    assert WorkflowRun.objects.filter(workflow="two_gates").count() == 1
    assert WorkflowScheduleTick.objects.filter(schedule__name="gated").count() == 2


def test_unknown_schedules_bodies_and_routes(clients, clock):
    make_schedule()
    missing = clients["changer"].get(f"{SCHEDULES}no-such/")
    assert missing.status_code == 404 and missing.json() == {
        "detail": "no schedule is named 'no-such'", "code": "SCHEDULE_NOT_FOUND"}
    assert clients["changer"].post(f"{SCHEDULES}no-such/trigger/", {},
                                   format="json").status_code == 404
    # Bodies are objects without unknown keys; routes answer without their slash.
    odd = clients["changer"].post(f"{SCHEDULES}every-minute/pause/", {"when": "now"},
                                  format="json")
    assert odd.status_code == 400 and "when" in odd.json()["errors"]
    assert clients["changer"].post(f"{SCHEDULES}every-minute/pause", {},
                                   format="json").status_code == 200
    assert clients["changer"].get(f"{SCHEDULES}every-minute/ticks/").status_code == 404
    assert clients["changer"].get(SCHEDULES + "?paused=1").status_code == 400
    assert not WorkflowSchedule.objects.get(name="every-minute").ticks.exists()


def test_start_at_and_delay(clients, clock, users):
    owner = client_for(users["owner"])
    delayed = owner.post(f"{API}workflows/sequential/start/",
                         {"data": {"x": 1}, "delay": "10min"}, format="json")
    assert delayed.status_code == 202 and delayed.json()["status"] == "scheduled"
    run = WorkflowRun.objects.get(pk=delayed.json()["id"])
    assert run.start_at == clock.now() + timedelta(minutes=10)
    assert owner.get(f"{API}runs/{run.pk}/").json()["status"] == "scheduled"
    at = "2030-01-07T10:30:00+01:00"  # 09:30 UTC: in half an hour
    later = owner.post(f"{API}workflows/sequential/start/",
                       {"data": {"x": 1}, "start_at": at}, format="json")
    assert later.status_code == 202
    assert WorkflowRun.objects.get(pk=later.json()["id"]).start_at == datetime.fromisoformat(at)
    before = WorkflowRun.objects.count()
    for body, field in (({"delay": "10min", "start_at": at}, "delay"),
                        ({"start_at": "2030-01-07T10:00:00"}, "start_at"),
                        ({"start_at": "tomorrow"}, "start_at"),
                        ({"delay": "soon"}, "delay"), ({"delay": -5}, "delay"),
                        ({"delay": True}, "delay")):
        refused = owner.post(f"{API}workflows/sequential/start/", {"data": {"x": 1}, **body},
                             format="json")
        assert refused.status_code == 400, body
        assert field in refused.json()["errors"], body
    assert WorkflowRun.objects.count() == before  # nothing half-written


def test_the_schema_documents_the_schedule_routes():
    generated = SchemaGenerator().get_schema(request=None, public=True)
    paths = generated["paths"]
    assert set(paths[f"{SCHEDULES}"]) == {"get"}
    assert set(paths[f"{SCHEDULES}{{name}}/"]) == {"get"}
    for verb in ("trigger", "pause", "resume"):
        operation = paths[f"{SCHEDULES}{{name}}/{verb}/"]["post"]
        assert operation["operationId"] == f"{verb}_schedule"
        assert {"200", "403", "404"} <= set(operation["responses"])
    schemas = generated["components"]["schemas"]
    assert set(schemas["PikkuTickStatus"]["enum"]) == {"started", "skipped", "buffered",
                                                       "missed"}
    assert "scheduled" in schemas["PikkuRunStatus"]["enum"]
    start = schemas["StartBody"]["properties"]
    assert {"start_at", "delay"} <= set(start)
    assert "recent_ticks" in schemas["ScheduleDetail"]["properties"]



def test_the_list_reads_a_page_in_queries_that_do_not_grow_with_it(clients, clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for_list() -> tuple[int, list]:
        with CaptureQueriesContext(connection) as captured:
            results = clients["viewer"].get(SCHEDULES).json()["results"]
        return len(captured.captured_queries), results

    for i in range(2):
        make_schedule(name=f"s{i}")
        operations.trigger_schedule(f"s{i}")
    queries_for_list()  # the first request reads the user's permissions too
    few, _ = queries_for_list()
    for i in range(2, 12):
        make_schedule(name=f"s{i}")
        operations.trigger_schedule(f"s{i}")
    many, results = queries_for_list()
    assert many == few
    assert all(row["last_tick"]["status"] == "started" for row in results)
