"""Pagination and filters, bounded counts, constant query counts, and the SSE stream."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows import paging
from pikku_workflows.api import stream
from pikku_workflows.models import WorkflowRun

from .conftest import API

pytestmark = pytest.mark.django_db


def make_runs(count, *, owner=None, workflow="sequential"):
    return [pw.start_workflow(workflow, {"x": i}, owner=owner) for i in range(count)]


def queries(client, url):
    """The queries of one request, the permission lookups included (as on a fresh user,
    whatever the client's earlier requests cached)."""
    user = client.handler._force_user
    for cache in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        user.__dict__.pop(cache, None)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(captured)


# --- pagination and filters ----------------------------------------------------------------


def test_pagination_keeps_the_contract_keys(staff):
    make_runs(5)
    first = staff.get(f"{API}runs/?page_size=2").json()
    assert set(first) == {"count", "count_is_estimate", "next", "previous", "results"}
    assert first["count"] == 5 and first["count_is_estimate"] is False
    assert len(first["results"]) == 2 and first["previous"] is None
    second = staff.get(first["next"]).json()
    last = staff.get(second["next"]).json()
    assert len(last["results"]) == 1 and last["next"] is None and last["previous"]
    seen = [r["id"] for page in (first, second, last) for r in page["results"]]
    expected = WorkflowRun.objects.order_by("-created_at").values_list("pk", flat=True)
    assert seen == [str(pk) for pk in expected]  # newest first, each once


def test_each_filter(staff, users):
    make_runs(2, owner=users["owner"])
    make_runs(1, owner=users["other"], workflow="two_gates")
    failed = pw.start_workflow("retrying", {"fail_times": 9, "retries": 0})
    old = WorkflowRun.objects.filter(workflow="two_gates").get()
    WorkflowRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))

    def ids(query):
        response = staff.get(f"{API}runs/?{query}")
        assert response.status_code == 200, response.content
        return {r["id"] for r in response.json()["results"]}

    assert len(ids("workflow=sequential")) == 2
    assert ids("status=failed") == {str(failed.pk)}
    assert ids("workflow=two_gates&status=suspended") == {str(old.pk)}
    assert len(ids(f"owner={users['owner'].pk}")) == 2
    cutoff = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert str(old.pk) not in ids(f"created_after={cutoff}")
    assert ids(f"created_before={cutoff}") == {str(old.pk)}
    assert ids("workflow=nope") == set()


def test_counts_are_exact_up_to_the_cap_then_bounded(staff, monkeypatch):
    make_runs(7)
    monkeypatch.setattr(paging, "COUNT_CAP", 5)
    monkeypatch.setattr(paging.bounded_count, "__defaults__", (5,))
    body = staff.get(f"{API}runs/?page_size=2").json()
    total, exact = paging.bounded_count(WorkflowRun.objects.all(), cap=5)
    assert exact is False and total >= 6 and body["count"] == total
    assert paging.bounded_count(WorkflowRun.objects.all(), cap=10) == (7, True)
    if connection.vendor == "postgresql":
        connection.cursor().execute("ANALYZE pikku_workflows_workflowrun")
        assert paging.estimated_count(WorkflowRun.objects.all()) is not None
        assert paging.estimated_count(WorkflowRun.objects.filter(status="completed")) >= 0
    else:
        assert paging.estimated_count(WorkflowRun.objects.all()) is None
        assert total == 6  # SQLite: the cap + 1 says "more than the cap"


# --- constant query counts -------------------------------------------------------------------


def test_list_costs_the_same_queries_at_any_size(staff, owner, users):
    make_runs(3, owner=users["owner"])
    small = (queries(staff, f"{API}runs/"), queries(owner, f"{API}runs/"),
             queries(staff, f"{API}runs/?workflow=sequential&status=completed"))
    make_runs(30, owner=users["owner"])
    large = (queries(staff, f"{API}runs/"), queries(owner, f"{API}runs/"),
             queries(staff, f"{API}runs/?workflow=sequential&status=completed"))
    assert small == large


@pytest.mark.parametrize("suffix", ["", "steps/", "history/", "timeline/"])
def test_detail_and_history_cost_the_same_queries_at_any_size(owner, suffix):
    short = pw.start_workflow("fan_out", {"numbers": [1, 2]}, owner=owner.handler._force_user)
    long = pw.start_workflow("fan_out", {"numbers": list(range(40))},
                             owner=owner.handler._force_user)
    assert long.steps.count() == 40
    assert queries(owner, f"{API}runs/{short.pk}/{suffix}") == \
        queries(owner, f"{API}runs/{long.pk}/{suffix}")


# --- server-sent events ----------------------------------------------------------------------


def events_of(chunks):
    """Parse SSE text into (event, data) pairs and retry hints."""
    parsed = []
    for block in "".join(chunks).split("\n\n"):
        if block.startswith("retry:"):
            parsed.append(("retry", block.split(":", 1)[1].strip()))
        elif block.startswith("event:"):
            name_line, data_line = block.split("\n", 1)
            parsed.append((name_line.split(": ", 1)[1], json.loads(data_line[6:])))
    return parsed


def read(response):
    return [chunk.decode() if isinstance(chunk, bytes) else chunk
            for chunk in response.streaming_content]


def test_a_finished_run_streams_update_then_done(owner):
    run = pw.start_workflow("sequential", {"x": 1}, owner=owner.handler._force_user)
    response = owner.get(f"{API}runs/{run.pk}/stream/", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    events = events_of(read(response))
    assert [name for name, _ in events] == ["retry", "update", "done"]
    assert events[2][1] == pw.get_run_status(run.pk)


def test_a_live_run_streams_each_change_until_done(owner, monkeypatch):
    monkeypatch.setattr(stream, "POLL_SECONDS", 0)
    run = pw.start_workflow("two_gates", {}, owner=owner.handler._force_user)
    response = owner.get(f"{API}runs/{run.pk}/stream/")
    chunks = iter(response.streaming_content)
    assert next(chunks).decode().startswith("retry:")
    first = events_of([next(chunks).decode()])
    assert first[0][0] == "update" and first[0][1]["status"] == "suspended"
    pw.resume_run(run.pk, "dock 4")  # to the second gate: a change
    second = events_of([next(chunks).decode()])
    assert second[0][1]["steps"][-1]["name"] == "suspend:Awaiting courier"
    pw.resume_run(run.pk, "courier 9")  # completes
    rest = events_of([c.decode() for c in chunks])
    assert [name for name, _ in rest] == ["update", "done"]
    assert rest[-1][1]["output"] == {"warehouse": "dock 4", "courier": "courier 9"}


def test_a_stream_ends_with_a_retry_hint_after_its_lifetime(owner, monkeypatch):
    monkeypatch.setattr(stream, "POLL_SECONDS", 0)
    monkeypatch.setattr(stream, "LIFETIME_SECONDS", 0)
    run = pw.start_workflow("two_gates", {}, owner=owner.handler._force_user)
    events = events_of(read(owner.get(f"{API}runs/{run.pk}/stream/")))
    assert [name for name, _ in events] == ["retry", "update", "retry"]


def test_a_stream_of_someone_elses_run_is_refused(owner, other, anonymous):
    run = pw.start_workflow("two_gates", {}, owner=owner.handler._force_user)
    refused = other.get(f"{API}runs/{run.pk}/stream/", HTTP_ACCEPT="text/event-stream")
    assert refused.status_code == 404 and not refused.streaming
    assert refused.json()["code"] == "NOT_FOUND"
    assert anonymous.get(f"{API}runs/{run.pk}/stream/").status_code in (401, 403)


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_stream_is_an_async_generator(users, monkeypatch):
    monkeypatch.setattr(stream, "POLL_SECONDS", 0)
    run = pw.start_workflow("sequential", {"x": 1}, owner=users["owner"])
    client = AsyncClient()

    async def fetch():
        await client.aforce_login(users["owner"])
        response = await client.get(f"{API}runs/{run.pk}/stream/")
        assert response.is_async
        return response.status_code, [chunk.decode() async for chunk in
                                      response.streaming_content]

    status, chunks = async_to_sync(fetch)()
    assert status == 200
    assert [name for name, _ in events_of(chunks)] == ["retry", "update", "done"]
