"""The console's Dashboard: the runs chart's geometry (bar heights proportional to the
counts, time labels in the user's zone), the p50/p95 of known durations, the failing steps,
the queues' schedule-to-start latency, the empty state, the span selector and who may
see the page; on the database under test (SQLite's bounded sample said on the page)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.admin import dashboard_data
from pikku_workflows.admin.dashboard_svg import BAR_W, PLOT_H, TOP
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.testing import fake_clock
from tests.admin.test_console import staff_client, url
from tests.testapp.executors import DECLINED_QUEUE

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 1, 7, 9, 30, 0, tzinfo=UTC)
PAGE = "rundashboard_changelist"
BAR = re.compile(r'<rect class="bar \w+" data-series="(\w+)" data-bucket="([^"]+)" '
                 r'data-count="(\d+)" x="[\d.]+" y="([\d.]+)" width="[\d.]+" '
                 r'height="([\d.]+)"')
LABEL = re.compile(r'<text class="time-label" data-bucket="([^"]+)"[^>]*>([^<]+)</text>')


@pytest.fixture
def clock():
    with fake_clock(NOW) as fake:
        yield fake


def make_run(workflow, status, created, finished=None):
    run = WorkflowRun.objects.create(workflow=workflow, status=status)
    WorkflowRun.objects.filter(pk=run.pk).update(created_at=created, finished_at=finished)
    return run


def make_attempt(run, name, *, rpc_name=None, attempt=1, status="succeeded", start,
                 seconds, scheduled=None, error=None):
    step, _ = WorkflowStep.objects.get_or_create(
        run=run, step_name=name, defaults={"rpc_name": rpc_name, "status": status})
    end = start + timedelta(seconds=seconds)
    return StepAttempt.objects.create(
        step=step, attempt=attempt, status=status, created_at=scheduled or start,
        scheduled_at=scheduled, running_at=start, error=error,
        succeeded_at=end if status == "succeeded" else None,
        failed_at=end if status == "failed" else None)


def page(client, **query):
    response = client.get(url(PAGE), query)
    return response, response.content.decode()


def bars(text):
    return {(series, bucket): (int(count), float(y), float(height))
            for series, bucket, count, y, height in BAR.findall(text)}


def row(text, table, key, value):
    found = re.search(rf'<table id="{table}">.*?<tr data-{key}="{re.escape(value)}"([^>]*)>',
                      text, flags=re.S)
    assert found, f"no row {value} in {table}"
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', found.group(1)))


def test_bars_are_proportional_to_the_counts_and_labelled_with_their_hours(admin_client,
                                                                           clock):
    for minute in (1, 10, 20, 59):  # 4 created in the 08:00 bucket
        make_run("wf_a", "running", NOW.replace(hour=8, minute=minute))
    for minute in (5, 6):  # 2 created at 06:00, finished in the 08:00 bucket
        make_run("wf_a", "completed", NOW.replace(hour=6, minute=minute),
                 NOW.replace(hour=8, minute=30))
    make_run("wf_a", "completed", NOW.replace(hour=3), NOW.replace(hour=8, minute=31))
    make_run("wf_b", "failed", NOW.replace(hour=6, minute=7), NOW.replace(hour=6, minute=8))
    make_run("wf_b", "running", NOW - timedelta(hours=30))  # before the window
    make_run("wf_b", "cancelled", NOW.replace(hour=7), NOW.replace(hour=7, minute=1))
    response, text = page(admin_client)
    assert response.status_code == 200
    drawn = bars(text)
    at = "2030-01-07T{:02d}:00:00+00:00".format
    assert {key: count for key, (count, _, _) in drawn.items()} == {
        ("created", at(8)): 4, ("created", at(6)): 3, ("created", at(3)): 1,
        ("created", at(7)): 1, ("completed", at(8)): 3, ("failed", at(6)): 1}
    base = TOP + PLOT_H
    for count, y, height in drawn.values():
        assert height == pytest.approx(count / 4 * PLOT_H, abs=0.01)
        assert y + height == pytest.approx(base, abs=0.01)
    assert 'data-top="4"' in text and 'data-value="4"' in text
    labels = dict(LABEL.findall(text))
    # 24 hourly buckets ending with the current one (09:00), a label every second hour.
    assert next(iter(labels)) == "2030-01-06T10:00:00+00:00"
    assert len(labels) == 12
    for stamp, shown in labels.items():
        assert shown == datetime.fromisoformat(stamp).strftime("%H:%M")
    assert labels[at(8)] == "08:00"


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_buckets_are_hours_of_the_user_s_time_zone(admin_client, clock):
    # 08:10 UTC is 13:40 in Kolkata (UTC+05:30): the bucket of 13:00 there, 07:30 UTC.
    make_run("wf_a", "running", NOW.replace(hour=8, minute=10))
    make_run("wf_a", "running", NOW.replace(hour=7, minute=50))
    make_run("wf_a", "running", NOW.replace(hour=7, minute=20))  # 12:50: the bucket before
    _, text = page(admin_client)
    drawn = bars(text)
    assert drawn[("created", "2030-01-07T13:00:00+05:30")][0] == 2
    assert drawn[("created", "2030-01-07T12:00:00+05:30")][0] == 1
    labels = dict(LABEL.findall(text))
    # 24 buckets from 16:00 the day before to the current one, 15:00 (09:30 UTC).
    assert next(iter(labels)) == "2030-01-06T16:00:00+05:30"
    assert labels["2030-01-07T12:00:00+05:30"] == "12:00"
    assert 'id="pk-zone">Asia/Kolkata<' in text


def test_the_last_hour_per_minute(admin_client, clock):
    for second in (0, 10, 59):
        make_run("wf_a", "running", NOW.replace(hour=9, minute=29, second=second))
    make_run("wf_a", "completed", NOW.replace(hour=9, minute=1),
             NOW.replace(hour=9, minute=5, second=30))
    make_run("wf_a", "running", NOW.replace(hour=8, minute=30, second=59))  # before 08:31
    _, text = page(admin_client, span="1h")
    drawn = bars(text)
    assert {key: count for key, (count, _, _) in drawn.items()} == {
        ("created", "2030-01-07T09:29:00+00:00"): 3,
        ("created", "2030-01-07T09:01:00+00:00"): 1,
        ("completed", "2030-01-07T09:05:00+00:00"): 1}
    assert drawn[("completed", "2030-01-07T09:05:00+00:00")][2] == pytest.approx(
        PLOT_H / 3, abs=0.01)
    labels = dict(LABEL.findall(text))
    assert next(iter(labels)) == "2030-01-07T08:31:00+00:00" and len(labels) == 12
    assert labels["2030-01-07T09:26:00+00:00"] == "09:26"
    assert '<strong data-span="1h">' in text


def test_p50_and_p95_of_known_durations(admin_client, clock):
    # 20 runs of 1..20 s, each with one step attempt of 0.1..2.0 s: percentile_cont's p50
    # is 10.5 s (between the 10th and 11th), its p95 19.05 s.
    for i in range(1, 21):
        finished = NOW - timedelta(minutes=i)
        run = make_run("wf_a", "completed" if i % 4 else "failed",
                       finished - timedelta(seconds=i), finished)
        make_attempt(run, "Charge", rpc_name="charge", start=finished - timedelta(seconds=i),
                     seconds=i / 10)
    make_run("wf_a", "completed", NOW - timedelta(days=2), NOW - timedelta(days=2) +
             timedelta(seconds=999))  # finished before the window
    make_run("wf_b", "completed", NOW - timedelta(seconds=90), NOW - timedelta(seconds=30))
    _, text = page(admin_client)
    runs = row(text, "pk-run-durations", "workflow", "wf_a")
    assert (runs["count"], runs["total"]) == ("20", "20")
    assert float(runs["p50"]) == pytest.approx(10.5)
    assert float(runs["p95"]) == pytest.approx(19.05)
    other = row(text, "pk-run-durations", "workflow", "wf_b")
    assert float(other["p50"]) == float(other["p95"]) == pytest.approx(60.0)
    steps = row(text, "pk-step-durations", "workflow", "wf_a")
    assert steps["total"] == "20"
    assert float(steps["p50"]) == pytest.approx(1.05)
    assert float(steps["p95"]) == pytest.approx(1.905)
    # The small bars: p95 of the table's largest row is drawn full length, the rest in
    # proportion (wf_b's 60 s is the largest p95 of the runs table).
    bars_of_a = re.search(r'<svg[^>]*class="pk-bars"[^>]*data-p50="10.5"[^>]*>(.*?)</svg>',
                          text, flags=re.S)
    assert bars_of_a
    widths = dict(re.findall(r'<rect class="(p50|p95)" x="0" y="\d+" width="([\d.]+)"',
                             bars_of_a.group(1)))
    assert float(widths["p50"]) == pytest.approx(10.5 / 60 * BAR_W, abs=0.01)
    assert float(widths["p95"]) == pytest.approx(19.05 / 60 * BAR_W, abs=0.01)


def test_sqlite_says_it_samples_and_postgresql_uses_every_value(admin_client, clock,
                                                                monkeypatch):
    monkeypatch.setattr(dashboard_data, "SQLITE_SAMPLE", 5)
    for i in range(1, 11):  # finished 1..10 min ago, lasting 10..1 s: the latest last longest
        finished = NOW - timedelta(minutes=i)
        make_run("wf_a", "completed", finished - timedelta(seconds=11 - i), finished)
    _, text = page(admin_client)
    runs = row(text, "pk-run-durations", "workflow", "wf_a")
    assert runs["total"] == "10"
    if connection.vendor == "postgresql":
        assert runs["count"] == "10" and 'id="pk-sampled"' not in text
        assert float(runs["p50"]) == pytest.approx(5.5)
    else:
        # The latest 5 runs: 10, 9, 8, 7 and 6 s.
        assert runs["count"] == "5" and 'id="pk-sampled"' in text
        assert "latest 5 values" in text and "(5 sampled)" in text
        assert float(runs["p50"]) == pytest.approx(8.0)
        assert float(runs["p95"]) == pytest.approx(9.8)


def test_the_failing_steps_most_first_with_their_last_error(admin_client, clock):
    run = make_run("wf_a", "failed", NOW - timedelta(hours=2), NOW - timedelta(hours=1))
    for attempt, minutes in ((1, 100), (2, 90), (3, 70)):
        make_attempt(run, "Charge", rpc_name="charge", attempt=attempt, status="failed",
                     start=NOW - timedelta(minutes=minutes), seconds=1,
                     error={"message": f"card declined {attempt}", "code": "STEP_FAILED"})
    other = make_run("wf_b", "completed", NOW - timedelta(hours=3), NOW - timedelta(hours=2))
    make_attempt(other, "Ship", rpc_name="ship", status="failed",
                 start=NOW - timedelta(hours=3), seconds=1, error={"message": "no truck"})
    old = make_run("wf_c", "failed", NOW - timedelta(days=3), NOW - timedelta(days=3))
    make_attempt(old, "Old", status="failed", start=NOW - timedelta(days=3), seconds=1,
                 error={"message": "long ago"})
    _, text = page(admin_client)
    table = re.search(r'<table id="pk-failing-steps">(.*?)</table>', text, flags=re.S)
    assert table
    shown = re.findall(r'<tr data-workflow="(\w+)" data-step="(\w+)" data-failures="(\d+)">',
                       table.group(1))
    assert shown == [("wf_a", "Charge", "3"), ("wf_b", "Ship", "1")]
    assert "card declined 3" in table.group(1) and "card declined 1" not in table.group(1)
    assert "<code>STEP_FAILED</code>" in table.group(1)
    assert "no truck" in table.group(1) and "long ago" not in text


def test_schedule_to_start_latency_per_queue(admin_client, clock):
    run = make_run("wf_a", "completed", NOW - timedelta(hours=1), NOW - timedelta(minutes=5))
    start = NOW - timedelta(minutes=30)
    for i, latency in enumerate((1.0, 2.0, 4.0)):  # q_declined's own queue
        make_attempt(run, f"Q{i}", rpc_name="q_declined", start=start, seconds=1,
                     scheduled=start - timedelta(seconds=latency))
    make_attempt(run, "Plain", rpc_name="not_registered", start=start, seconds=1,
                 scheduled=start - timedelta(milliseconds=500))
    make_attempt(run, "Inline", rpc_name="echo", start=start, seconds=1)  # not queued
    _, text = page(admin_client)
    declined = row(text, "pk-queue-latency", "queue", DECLINED_QUEUE)
    assert declined["total"] == "3"
    assert float(declined["p50"]) == pytest.approx(2.0)
    assert float(declined["p95"]) == pytest.approx(3.8)
    default = row(text, "pk-queue-latency", "queue", "pikku-workflow-step-worker")
    assert default["total"] == "1" and float(default["p50"]) == pytest.approx(0.5)
    assert "The queue a job was sent to is not recorded" in text


def test_the_empty_state(admin_client, clock):
    for span in ("24h", "1h"):
        response, text = page(admin_client, span=span)
        assert response.status_code == 200
        assert 'data-top="0"' in text and not bars(text)
        assert "No run created or finished in this window." in text
        assert "No run completed or failed in this window." in text
        assert "No step attempt in the runs of this window." in text
        assert "No step attempt failed in this window." in text
        assert "No queued step started in the runs of this window." in text
        assert "No run of this window recorded a first step." in text
        assert len(LABEL.findall(text)) == 12  # the time axis is still drawn


def test_an_unknown_span_is_refused_clearly(admin_client, clock):
    make_run("wf_a", "running", NOW - timedelta(minutes=1))
    response, text = page(admin_client, span="7d")
    assert response.status_code == 400
    assert "Unknown span &#x27;7d&#x27;: choose one of 1h, 24h" in text
    assert '<strong data-span="24h">' in text  # the default window, drawn
    assert bars(text)


def test_the_runs_chart_says_it_counts_runs_created(admin_client, clock):
    """A delayed start counts in the bucket it was created in, and the chart says
    "created", never "started"."""
    make_run("wf_a", "scheduled", NOW.replace(hour=8, minute=5))
    _, text = page(admin_client)
    assert {series for series, _ in bars(text)} == {"created"}
    legend = re.findall(r'<g class="legend" data-series="(\w+)">', text)
    assert legend == ["created", "completed", "failed"]
    assert "<title>Runs created, completed and failed:" in text
    assert "Created: runs by the time they were created" in text
    chart = text.split('id="pk-runs-chart"', 1)[1].split("</div>", 1)[0]
    assert "started" not in chart.lower()


def test_who_may_see_the_dashboard(client, django_user_model, clock):
    assert client.get(url(PAGE)).status_code == 302  # anonymous: the login page
    nobody, _ = staff_client(django_user_model, "nobody")
    assert nobody.get(url(PAGE)).status_code == 403
    assert "Dashboard" not in nobody.get("/admin/").content.decode()
    other, _ = staff_client(django_user_model, "limits", "view_workflowlimit")
    assert other.get(url(PAGE)).status_code == 403
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowrun")
    assert viewer.get(url(PAGE)).status_code == 200
    index = viewer.get("/admin/").content.decode()
    assert f'<a href="{url(PAGE)}">Dashboard</a>' in index
    user = django_user_model.objects.create_user("plain", password="pw", is_staff=False)
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    client.force_login(user)
    assert client.get(url(PAGE)).status_code == 302


def test_runs_the_engine_recorded_are_counted(admin_client):
    """No seeded timestamps: runs started and finished by the engine, on real time."""
    pw.run_to_completion("sequential", {"x": 1})
    _, text = page(admin_client, span="1h")
    drawn = bars(text)
    assert sum(c for (series, _), (c, _, _) in drawn.items() if series == "created") == 1
    assert sum(c for (series, _), (c, _, _) in drawn.items() if series == "completed") == 1
    runs = row(text, "pk-run-durations", "workflow", "sequential")
    assert runs["total"] == "1"
    steps = row(text, "pk-step-durations", "workflow", "sequential")
    assert int(steps["total"]) >= 1
    first_pass = row(text, "pk-pass-latency", "workflow", "sequential")
    assert first_pass["total"] == "1" and float(first_pass["p50"]) >= 0


def make_step(run, name, created):
    step = WorkflowStep.objects.create(run=run, step_name=name, status="succeeded")
    WorkflowStep.objects.filter(pk=step.pk).update(created_at=created)
    return step


def test_first_pass_latency_per_workflow(admin_client, clock):
    """From a run's creation (or its start_at, when later) to its first step row."""
    finished = NOW - timedelta(minutes=5)
    created = NOW - timedelta(hours=1)
    for latency in (1.0, 2.0, 4.0):
        run = make_run("sequential", "completed", created, finished)
        make_step(run, "Add", created + timedelta(seconds=latency))
        make_step(run, "Double", created + timedelta(seconds=latency + 30))  # not the first
    delayed = make_run("sequential", "completed", created, finished)
    WorkflowRun.objects.filter(pk=delayed.pk).update(start_at=created + timedelta(minutes=10))
    make_step(delayed, "Add", created + timedelta(minutes=10, seconds=3))  # 3 s after due
    make_run("sequential", "completed", created, finished)  # no step: not counted
    rerun = make_run("sequential", "completed", created, finished)  # kept steps: not counted
    WorkflowRun.objects.filter(pk=rerun.pk).update(fork_step="Double")
    make_step(rerun, "Add", created - timedelta(days=1))
    make_step(rerun, "Double", created + timedelta(seconds=50))
    old = make_run("sequential", "completed", NOW - timedelta(days=3), NOW - timedelta(days=2))
    make_step(old, "Add", NOW - timedelta(days=3) + timedelta(seconds=99))  # before the window
    other = make_run("unregistered_wf", "failed", created, finished)
    make_step(other, "A", created + timedelta(milliseconds=250))
    make_run("sequential", "running", created)  # not finished: not in the window's runs
    _, text = page(admin_client)
    sequential = row(text, "pk-pass-latency", "workflow", "sequential")
    assert sequential["total"] == "4"  # 1, 2, 3 and 4 s
    assert float(sequential["p50"]) == pytest.approx(2.5)
    assert float(sequential["p95"]) == pytest.approx(3.85)
    assert sequential["queue"] == "pikku-workflow-orchestrator"
    unknown = row(text, "pk-pass-latency", "workflow", "unregistered_wf")
    assert unknown["total"] == "1" and float(unknown["p50"]) == pytest.approx(0.25)
    help_text = re.search(r'<p class="help" id="pk-pass-latency-help">(.*?)</p>', text,
                          flags=re.S).group(1)
    assert "from the run&#x27;s creation" in help_text or "from the run's creation" in help_text
    assert "<code>start_at</code>" in help_text and "first step row" in help_text
    assert "upper bound" in help_text
    queued_help = re.search(r'<p class="help" id="pk-queue-latency-help">(.*?)</p>', text,
                            flags=re.S).group(1)
    assert "declares it now" in queued_help and "not recorded" in queued_help


def test_first_pass_latency_groups_by_the_workflows_queue_today(admin_client, clock):
    run = make_run("isolated", "completed", NOW - timedelta(hours=1), NOW - timedelta(minutes=1))
    make_step(run, "Isolated", NOW - timedelta(hours=1) + timedelta(seconds=2))
    _, text = page(admin_client)
    isolated = row(text, "pk-pass-latency", "workflow", "isolated")
    assert isolated["queue"] == "pikku-test-dedicated-runs"
    assert float(isolated["p50"]) == pytest.approx(2.0)


@pytest.mark.postgres_only
def test_first_pass_latency_reads_the_windows_runs_through_indexes(clock):
    """The query reaches the window's finished runs through their partial index and each
    run's steps through the steps' run key: never a scan of either table."""
    win = dashboard_data.window(dashboard_data.SPANS["24h"])
    with connection.cursor() as cursor:
        # Tiny test tables are always scanned: forbid the scan to learn whether the
        # indexes apply at all.
        cursor.execute("SET LOCAL enable_seqscan = off")
        inner, params = dashboard_data.first_steps(win).query.sql_with_params()
        cursor.execute(f"EXPLAIN {inner}", params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "Seq Scan" not in plan, plan
    assert "pikku_run_finished" in plan, plan
    assert re.search(r"Index (Only )?Scan using \w+ on pikku_workflows_workflowstep", plan), plan
