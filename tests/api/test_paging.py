"""Paging of every list (issue 22): steps/, history/ and timeline/ paginated like runs/,
checked page parameters, count_is_estimate, the runs list's cursor mode, strict query
strings, JSON 404s for unknown routes, and routes with or without their trailing slash."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows import paging
from pikku_workflows.api.serializers import StepSerializer
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep

from .conftest import API

pytestmark = pytest.mark.django_db

ENVELOPE = {"count", "count_is_estimate", "next", "previous", "results"}


def get_ok(client, url, params=None):
    response = client.get(url, params)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == ENVELOPE, body
    return body


def walk(client, url, params=None):
    """Every page from ``url`` following ``next``: the pages' bodies."""
    pages = [get_ok(client, url, params)]
    while pages[-1]["next"]:
        pages.append(get_ok(client, pages[-1]["next"]))
    return pages


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json", response["Content-Type"]
    body = response.json()
    assert body["code"] == code and isinstance(body["detail"], str) and body["detail"]
    return body


@pytest.fixture
def fanned(users):
    """A run of 12 steps, owned by the ``owner`` client's user."""
    return pw.start_workflow("fan_out", {"numbers": list(range(12))}, owner=users["owner"])


# --- steps/, history/, timeline/ -------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["steps", "history", "timeline"])
def test_a_runs_parts_are_paginated_with_exact_counts(owner, fanned, suffix):
    whole = get_ok(owner, f"{API}runs/{fanned.pk}/{suffix}/", {"page_size": 500})
    assert whole["count"] == len(whole["results"]) > 12 if suffix == "timeline" else True
    assert whole["next"] is None and whole["previous"] is None
    assert whole["count_is_estimate"] is False
    pages = walk(owner, f"{API}runs/{fanned.pk}/{suffix}/", {"page_size": 5})
    assert [len(p["results"]) for p in pages[:-1]] == [5] * (len(pages) - 1)
    assert all(p["count"] == whole["count"] for p in pages)
    assert [row for p in pages for row in p["results"]] == whole["results"]
    assert pages[0]["previous"] is None and pages[1]["previous"]
    past = owner.get(f"{API}runs/{fanned.pk}/{suffix}/", {"page_size": 5,
                                                           "page": len(pages) + 1})
    assert_error(past, 404, "NOT_FOUND")


def test_the_default_page_of_steps_is_50(owner, users):
    run = pw.start_workflow("fan_out", {"numbers": list(range(60))}, owner=users["owner"])
    first = get_ok(owner, f"{API}runs/{run.pk}/steps/")
    assert len(first["results"]) == 50 and first["count"] == 60 and first["next"]


def test_steps_rows_are_what_the_step_serializer_renders(owner, users):
    runs = [pw.start_workflow("retrying", {"fail_times": 5, "retries": 1},
                              owner=users["owner"]),
            pw.start_workflow("fan_out", {"numbers": [1, 2]}, owner=users["owner"]),
            pw.start_workflow("parent", {"child": "child_ok"}, owner=users["owner"])]
    assert WorkflowStep.objects.filter(run=runs[2], child_run__isnull=False).exists()
    for run in runs:
        steps = WorkflowStep.objects.filter(run=run).order_by("id")
        listed = get_ok(owner, f"{API}runs/{run.pk}/steps/")["results"]
        assert listed == StepSerializer(steps, many=True).data


def test_the_timeline_is_every_attempt_timestamp_in_time_order(owner, users):
    run = pw.start_workflow("retrying", {"fail_times": 2, "retries": 3}, owner=users["owner"])
    expected = []
    for attempt in StepAttempt.objects.filter(step__run=run).select_related("step"):
        for order, name in enumerate(("created", "scheduled", "running", "succeeded",
                                      "failed")):
            at = getattr(attempt, f"{name}_at")
            if at is not None:
                event = {"at": at.isoformat(), "step": attempt.step.step_name,
                         "label": attempt.step.step_name, "kind": "step",
                         "attempt": attempt.attempt, "event": name}
                if name == "failed":
                    event["error"] = {k: attempt.error[k] for k in ("message", "code", "step")
                                      if k in attempt.error}
                expected.append(((at, attempt.pk, order), event))
    expected.sort(key=lambda item: item[0])
    listed = [e for p in walk(owner, f"{API}runs/{run.pk}/timeline/", {"page_size": 2})
              for e in p["results"]]
    assert listed == [event for _, event in expected]


# --- page and page_size ------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["runs/", "runs/{id}/steps/", "runs/{id}/history/",
                                   "runs/{id}/timeline/"])
@pytest.mark.parametrize(("name", "value"), [
    ("page", "0"), ("page", "-1"), ("page", "abc"), ("page", "1.5"), ("page", "last"),
    ("page", " 1"), ("page", "\u0661"), ("page_size", "0"), ("page_size", "-5"),
    ("page_size", "abc"), ("page_size", "2.0"), ("page_size", "00"),
])
def test_page_parameters_that_are_not_whole_numbers_from_1_are_400(owner, fanned, route,
                                                                    name, value):
    response = owner.get(API + route.format(id=fanned.pk), {name: value})
    body = assert_error(response, 400, "INVALID")
    assert name in body["detail"] and "whole number from 1" in body["detail"]
    assert list(body["errors"]) == [name]


@pytest.mark.parametrize("route", ["runs/", "runs/{id}/steps/"])
def test_pages_past_the_end_are_404_and_big_page_sizes_are_500(owner, fanned, route):
    url = API + route.format(id=fanned.pk)
    for page in ("2", "99999999999999999999", "9" * 5000):
        assert_error(owner.get(url, {"page": page}), 404, "NOT_FOUND")
    assert get_ok(owner, url, {"page": "1", "page_size": "9" * 40})["results"]
    assert get_ok(owner, url, {"page": "", "page_size": ""})["results"]  # empty: absent
    assert get_ok(owner, url, {"page": "001"})["results"]


def test_a_page_past_the_end_is_404_even_when_the_count_is_an_estimate(staff, monkeypatch):
    for i in range(7):
        pw.start_workflow("sequential", {"x": i})
    monkeypatch.setattr(paging.bounded_count, "__defaults__", (3,))
    first = get_ok(staff, f"{API}runs/", {"page_size": 2})
    assert first["count_is_estimate"] is True and first["count"] >= 4
    last = get_ok(staff, f"{API}runs/", {"page_size": 2, "page": 4})
    assert len(last["results"]) == 1 and last["next"] is None  # read from the rows
    assert_error(staff.get(f"{API}runs/", {"page_size": 2, "page": 5}), 404, "NOT_FOUND")


def test_count_is_estimate_says_when_count_is_exact(staff, monkeypatch):
    for i in range(5):
        pw.start_workflow("sequential", {"x": i})
    assert get_ok(staff, f"{API}runs/")["count_is_estimate"] is False
    monkeypatch.setattr(paging.bounded_count, "__defaults__", (3,))
    for params in ({}, {"paginate": "cursor"}):
        body = get_ok(staff, f"{API}runs/", params)
        assert body["count_is_estimate"] is True and body["count"] >= 4
        body = get_ok(staff, f"{API}runs/", {**params, "workflow": "nope"})
        assert body["count_is_estimate"] is False and body["count"] == 0


# --- the cursor ---------------------------------------------------------------------------------


def test_cursor_pages_neither_repeat_nor_skip_runs_started_in_between(staff):
    before = [pw.start_workflow("sequential", {"x": i}).pk for i in range(7)]
    first = get_ok(staff, f"{API}runs/", {"paginate": "cursor", "page_size": 3})
    assert first["previous"] is None and first["count"] == 7
    seen = [r["id"] for r in first["results"]]
    page = first
    while page["next"]:
        # Runs started between two requests sort before the first page: not in these.
        pw.start_workflow("sequential", {"x": 100})
        pw.start_workflow("sequential", {"x": 101})
        page = get_ok(staff, page["next"])
        seen += [r["id"] for r in page["results"]]
    assert seen == [str(pk) for pk in reversed(before)]
    # Back from the last page by previous: the same runs again, in the same order.
    back = [r["id"] for r in page["results"]]
    while page["previous"]:
        page = get_ok(staff, page["previous"])
        back = [r["id"] for r in page["results"]] + back
    newer = list(WorkflowRun.objects.order_by("-created_at", "-id").values_list("pk",
                                                                               flat=True))
    assert back == [str(pk) for pk in newer[:len(back)]]
    assert back[-len(before):] == seen


def test_cursor_mode_orders_equal_times_by_id(staff):
    runs = [pw.start_workflow("sequential", {"x": i}) for i in range(5)]
    moment = runs[0].created_at
    WorkflowRun.objects.filter(pk__in=[r.pk for r in runs]).update(created_at=moment)
    pages = walk(staff, f"{API}runs/", {"paginate": "cursor", "page_size": 2})
    seen = [r["id"] for p in pages for r in p["results"]]
    assert seen == sorted((str(r.pk) for r in runs), reverse=True)


def test_cursor_mode_keeps_the_filters(staff, users):
    for i in range(4):
        pw.start_workflow("sequential", {"x": i}, owner=users["owner"])
        pw.start_workflow("sequential", {"x": i})
    pages = walk(staff, f"{API}runs/", {"paginate": "cursor", "page_size": 3,
                                        "owner": users["owner"].pk})
    assert [len(p["results"]) for p in pages] == [3, 1]
    assert all(r["owner"] == users["owner"].pk for p in pages for r in p["results"])
    assert all(f"owner={users['owner'].pk}" in p["next"] for p in pages[:-1])


@pytest.mark.parametrize(("params", "name"), [
    ({"paginate": "pages"}, "paginate"),
    ({"paginate": "cursor", "page": "2"}, "page"),
    ({"cursor": "bm90IGEgY3Vyc29y"}, "cursor"),  # "not a cursor"
    ({"cursor": "%%%"}, "cursor"),
    ({"cursor": "cD1ub3QtYS10aW1l"}, "cursor"),  # p=not-a-time
    ({"cursor": "cD05OTk5LTEyLTMxVDIzOjAwOjAwLTA1OjAw"}, "cursor"),  # p=year 10000 in UTC
    ({"cursor": "cD0yMDI2LTAxLTAxVDAwOjAwOjAwKzE2OjAw"}, "cursor"),  # p=...+16:00
    ({"cursor": "bz0tMQ=="}, "cursor"),  # o=-1
    ({"paginate": "page", "cursor": "cD0yMDI2LTAxLTAxVDAwOjAwOjAwWg=="}, "cursor"),
])
def test_bad_cursor_requests_are_400(staff, params, name):
    pw.start_workflow("sequential", {"x": 1})
    body = assert_error(staff.get(f"{API}runs/", params), 400, "INVALID")
    assert list(body["errors"]) == [name] and name in body["detail"]


# --- strict query strings ------------------------------------------------------------------------


GET_ROUTES = {
    "workflows/": [],
    "workflows/sequential/": [],
    "runs/": ["workflow", "status", "owner", "created_after", "created_before", "page",
              "page_size", "paginate", "cursor"],
    "runs/{id}/": [],
    "runs/{id}/steps/": ["page", "page_size"],
    "runs/{id}/history/": ["page", "page_size"],
    "runs/{id}/timeline/": ["page", "page_size"],
    "runs/{id}/stream/": [],
}


@pytest.mark.parametrize("route", list(GET_ROUTES))
def test_unknown_query_parameters_are_400_naming_them_and_the_accepted_ones(owner, fanned,
                                                                            route):
    url = API + route.format(id=fanned.pk)
    response = owner.get(url, {"stauts": "failed", "page_sise": "2"})
    body = assert_error(response, 400, "UNKNOWN_PARAMETER")
    assert sorted(body["errors"]) == ["page_sise", "stauts"]
    assert "'page_sise', 'stauts'" in body["detail"]
    for name in GET_ROUTES[route]:
        assert name in body["detail"]
    if not GET_ROUTES[route]:
        assert "takes format." in body["detail"]  # DRF's own ?format= only
    # What the route takes is fine, as is DRF's format.
    ok = owner.get(url, {"format": "json"}) if "stream" not in route else None
    assert ok is None or ok.status_code == 200, ok.content


def test_unknown_query_parameters_are_not_checked_before_sign_in(anonymous):
    assert anonymous.get(f"{API}runs/", {"nope": 1}).status_code in (401, 403)


# --- unknown routes and trailing slashes ---------------------------------------------------------


@pytest.mark.parametrize("path", [
    "runs/{id}/nope/", "runs/{id}/nope", "runs/{id}/steps/extra/", "workflows/x/y/z/",
    "workflows/sequential/start/again/", "runs/a/b/c/d", "runs//", "events/x/",
    "runs/{id}/state/extra/",
])
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_unknown_routes_are_the_apis_json_404(owner, fanned, path, method):
    response = getattr(owner, method)(API + path.format(id=fanned.pk))
    assert_error(response, 404, "NOT_FOUND")


def test_routes_answer_with_and_without_their_trailing_slash(owner, users):
    run = pw.start_workflow("two_gates", {}, owner=users["owner"])
    for path in ("workflows", "workflows/sequential", "runs", f"runs/{run.pk}",
                 f"runs/{run.pk}/steps", f"runs/{run.pk}/history", f"runs/{run.pk}/state"):
        assert owner.get(API + path).status_code == 200, path
        assert owner.get(API + path + "/").status_code == 200, path
    started = owner.post(f"{API}workflows/sequential/start", {"data": {"x": 1}},
                         format="json")
    assert started.status_code == 202, started.content
    message = owner.post(f"{API}runs/{run.pk}/messages", {"data": 1}, format="json")
    assert message.status_code == 202, message.content
    cancelled = owner.post(f"{API}runs/{run.pk}/cancel", {"reason": "no slash"},
                           format="json")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert owner.delete(f"{API}runs/{run.pk}").status_code == 204
