"""Bad input to the REST API: every POST route, every unreadable or unstorable body.

Each answer is a clear 4xx ``{detail, code[, errors]}``, never a 500, and nothing is
written: the database is compared row by row before and after, and no step function ran.

Already covered in tests/unit/api/test_routes.py (not repeated here): on ``start/``, malformed
JSON, unknown fields, blank and long idempotency keys, a non-object body; 413 on
``start/`` and ``resume/``; a cancel reason that is an object; invalid list filters.
"""

from __future__ import annotations

import json
from base64 import b64encode
from datetime import timedelta, timezone
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pikku_workflows.engine.serialization import MAX_JSON_DEPTH
from pikku_workflows.models import WorkflowRun, WorkflowStep
from tests.conftest import API, runs_in_each_state
from tests.testapp.shared import CALLS

from .conftest import nested

pytestmark = pytest.mark.django_db

DEEP = "[" * 10_000 + "]" * 10_000


@pytest.fixture
def runs(users):
    """A run in each state a POST route applies to, owned by the ``owner`` client's user,
    who may send events too (before the client's first permission check caches them)."""
    users["owner"].user_permissions.add(Permission.objects.get(codename="add_workflowevent"))
    return runs_in_each_state(users["owner"])


def post_routes(runs):
    """Every POST route of the API, with a valid body for it."""
    return {
        "start": (f"{API}workflows/sequential/start/", {"data": {"x": 1}}),
        "run": (f"{API}workflows/sequential/run/", {"data": {"x": 1}}),
        "resume": (f"{API}runs/{runs['suspended'].pk}/resume/", {"data": 1}),
        "cancel": (f"{API}runs/{runs['suspended'].pk}/cancel/", {"reason": "x"}),
        "retry": (f"{API}runs/{runs['failed'].pk}/retry/", {}),
        "approve": (f"{API}runs/{runs['gated'].pk}/approve/",
                    {"reason": "Manager sign-off", "decision": {"ok": True}}),
        "event": (f"{API}events/", {"event": "paid", "data": 1}),
        "message": (f"{API}runs/{runs['suspended'].pk}/messages/", {"data": 1}),
    }


ROUTES = ["start", "run", "resume", "cancel", "retry", "approve", "event", "message"]


def assert_error(response, status, code=None):
    assert response.status_code == status, response.content
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"]
    assert isinstance(body["code"], str) and body["code"]
    if code is not None:
        assert body["code"] == code, body
    return body


def wrap(route: str, raw: str) -> str:
    """A body whose one field holds the raw JSON text ``raw``."""
    field = {"start": "data", "run": "data", "resume": "data", "cancel": "reason",
             "retry": "data", "approve": "decision", "event": "data",
             "message": "data"}[route]
    extra = {"approve": '"reason": "Manager sign-off", ',
             "event": '"event": "paid", '}.get(route, "")
    return "{" + extra + f'"{field}": {raw}' + "}"


# --- unreadable bodies ------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("what", "body"), [
    ("malformed", b'{"data": [1, 2'),
    ("trailing garbage", b'{"data": 1} {"data": 2}'),
    ("non-utf-8", b'{"data": "\xff\xfe\xfa"}'),
    ("latin-1 declared as utf-8", '{"data": "caf\u00e9"}'.encode("latin-1")),
    ("NaN", b'{"data": NaN}'),
    ("Infinity", b'{"data": [Infinity]}'),
    ("10,000 levels", ('{"data": ' + DEEP + "}").encode()),
])
def test_unreadable_bodies_are_400_on_every_route(owner, runs, unchanged, route, what, body):
    url, _ = post_routes(runs)[route]
    check = unchanged()
    response = owner.generic("POST", url, body, content_type="application/json")
    assert_error(response, 400, "PARSE_ERROR")
    check()
    assert not CALLS


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_charset_is_400(owner, runs, unchanged, route):
    url, valid = post_routes(runs)[route]
    check = unchanged()
    response = owner.generic("POST", url, json.dumps(valid),
                             content_type="application/json; charset=bz2_codec")
    assert response.status_code in (400, 415), response.content
    assert response.json()["code"]
    check()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("content_type", "body"), [
    ("text/plain", '{"data": 1}'),
    ("application/xml", "<data>1</data>"),
    ("application/x-www-form-urlencoded", "data=" + DEEP),
    ("multipart/form-data; boundary=BoUnDaRy",
     '--BoUnDaRy\r\nContent-Disposition: form-data; name="data"\r\n\r\n1\r\n--BoUnDaRy--\r\n'),
])
def test_bodies_that_are_not_json_are_415(owner, runs, unchanged, route, content_type, body):
    """The API takes JSON only: a form or a file upload is never parsed (form-encoded
    ``data`` used to be decoded as JSON, and 10,000 levels of it were a 500)."""
    url, _ = post_routes(runs)[route]
    check = unchanged()
    response = owner.generic("POST", url, body, content_type=content_type)
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    check()
    assert not CALLS


@pytest.mark.parametrize("route", ["run", "cancel", "retry", "approve", "event", "message"])
def test_bodies_over_max_input_bytes_are_413_on_the_other_routes(owner, runs, unchanged,
                                                                  route):
    url, _ = post_routes(runs)[route]
    big = wrap(route, json.dumps("z" * 400))
    check = unchanged()
    with override_settings(PIKKU_WORKFLOWS={"MAX_INPUT_BYTES": 200}):
        response = owner.generic("POST", url, big, content_type="application/json")
        # A lying Content-Length is no way round it: the body read is measured too.
        lying = owner.generic("POST", url, big, content_type="application/json",
                              CONTENT_LENGTH="10")
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert lying.status_code in (400, 413)
    check()


# --- readable but unstorable values -------------------------------------------------------------


UNSTORABLE = [
    ("NUL in a string", '"a\\u0000b"'),
    ("NUL in a key", '{"a\\u0000b": 1}'),
    ("a lone surrogate", '"\\ud800"'),
    ("a lone low surrogate in a list", '["ok", "\\udfff"]'),
    (f"{MAX_JSON_DEPTH + 1} levels", json.dumps(nested(MAX_JSON_DEPTH + 1))),
    ("900 levels", json.dumps(nested(900))),
]


@pytest.mark.parametrize("route", ["start", "run", "resume", "approve", "event", "message"])
@pytest.mark.parametrize(("what", "raw"), UNSTORABLE)
def test_values_no_database_can_store_are_400_on_both_databases(owner, runs, unchanged,
                                                                 route, what, raw):
    """PostgreSQL's jsonb refuses U+0000 and lone surrogates (a DataError, a 500, used to
    follow); values nested past MAX_JSON_DEPTH cannot be read back safely. Both are refused
    before anything is written, the same way on SQLite."""
    url, _ = post_routes(runs)[route]
    check = unchanged()
    response = owner.generic("POST", url, wrap(route, raw), content_type="application/json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] in ("INVALID_INPUT", "PARSE_ERROR")
    if body["code"] == "INVALID_INPUT":
        assert "cannot be stored" in body["detail"]
    check()
    assert not CALLS


def test_values_at_the_depth_limit_are_stored_and_read_back(owner, users):
    value = nested(MAX_JSON_DEPTH - 1)  # inside {"value": ...}: MAX_JSON_DEPTH levels
    response = owner.post(f"{API}workflows/returns_given/start/", {"data": {"value": value}},
                          format="json")
    assert response.status_code == 202, response.content
    detail = owner.get(f"{API}runs/{response.json()['id']}/")
    assert detail.status_code == 200 and detail.json()["output"] == value


def test_an_idempotency_key_with_control_characters_is_400(owner, unchanged):
    check = unchanged()
    for key in ("a\u0000b", "line\nbreak", "\u001b[2J", "\ud800"):
        response = owner.generic(
            "POST", f"{API}workflows/sequential/start/",
            json.dumps({"data": {"x": 1}, "idempotency_key": key}),
            content_type="application/json")
        assert response.status_code == 400, (key, response.content)
    check()


@pytest.mark.parametrize("text", ["a\u0000b", "line\nbreak", "\u001b[2J", "\ud800", " "])
def test_names_and_keys_of_events_and_messages_with_control_characters_are_400(
        owner, runs, unchanged, text):
    """Event names, keys, topics and idempotency keys: the same rules as a start's key."""
    message_url = f"{API}runs/{runs['suspended'].pk}/messages/"
    bodies = [
        (f"{API}events/", {"event": text}),
        (f"{API}events/", {"event": "paid", "key": text}),
        (f"{API}events/", {"event": "paid", "idempotency_key": text}),
        (message_url, {"topic": text}),
        (message_url, {"idempotency_key": text}),
    ]
    check = unchanged()
    for url, body in bodies:
        response = owner.generic("POST", url, json.dumps(body), content_type="application/json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["code"] in ("INVALID", "INVALID_INPUT")
    check()


# --- cancel reasons and approval reasons ----------------------------------------------------


@pytest.mark.parametrize("reason", [
    "", "   ", "x" * 1001, 123, ["a"], {"a": 1}, True,
    "a\u0000b", "\u001b[2J\u001b[31mred", "bell\u0007", "\ud800",
])
def test_bad_cancel_reasons_are_400_and_the_run_stays(owner, runs, unchanged, reason):
    run = runs["suspended"]
    check = unchanged()
    response = owner.generic("POST", f"{API}runs/{run.pk}/cancel/",
                             json.dumps({"reason": reason}), content_type="application/json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert "reason" in body.get("errors", {}) or "reason" in body["detail"]
    check()
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"


def test_a_multi_line_cancel_reason_is_fine(owner, runs):
    run = runs["suspended"]
    response = owner.post(f"{API}runs/{run.pk}/cancel/", {"reason": "no courier\n\tsorry"},
                          format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


@pytest.mark.parametrize("reason", [
    "", "   ", "x" * 281, 5, None, ["Manager sign-off"], {"a": 1},
    "Manager\u0000sign-off", "\u001b[2J", "Manager sign-off#1", "Manager:onError",
    "__workflow_suspend:Awaiting warehouse", "\ud800",
])
def test_bad_approval_reasons_are_400_and_nothing_is_recorded(owner, runs, unchanged, reason):
    run = runs["gated"]
    check = unchanged()
    response = owner.generic("POST", f"{API}runs/{run.pk}/approve/",
                             json.dumps({"reason": reason, "decision": {"ok": True}}),
                             content_type="application/json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert "reason" in body.get("errors", {}) or "reason" in body["detail"]
    check()
    run.refresh_from_db()
    assert run.status == "suspended" and not any(k.startswith("__approval_") for k in run.state)


# --- list filters and pages ----------------------------------------------------------------------


@pytest.mark.parametrize("query", [
    "workflow=%00", "workflow=" + "w" * 5000, "status=exploded", "status=%00", "owner=-1",
    "owner=99999999999999999999999", "owner=%00", "created_after=%00",
    "created_before=2024-13-45", "page=0", "page=-1", "page=abc", "page=99999999999999999999",
    "page_size=abc", "page_size=-5", "page_size=99999999999999999999", "ordering=password",
])
def test_bad_list_queries_are_4xx_or_ignored_never_500(owner, runs, query):
    response = owner.get(f"{API}runs/?{query}")
    assert response.status_code in (200, 400, 404), (query, response.content)
    if response.status_code != 200:
        assert response.json()["code"]


@pytest.mark.parametrize("value", [
    "2026-01-01T00:00:00+16:00",  # PostgreSQL: "time zone displacement out of range"
    "2026-01-01T00:00:00-16:00",
    "2026-01-01T00:00:00+14:00:01",
    "9999-12-31T23:00:00-05:00",  # year 10000 in UTC
    "0001-01-01T00:00:00+01:00",  # year 0 in UTC
])
@pytest.mark.parametrize("name", ["created_after", "created_before"])
def test_a_date_filter_with_an_offset_no_database_takes_is_400(owner, runs, name, value):
    """Issue 22, defect 4: an offset past what PostgreSQL takes (about ±16 hours) was an
    HTML 500 there; it is a 400 naming the filter on both databases."""
    response = owner.get(f"{API}runs/", {name: value})
    body = assert_error(response, 400, "INVALID")
    assert name in body["errors"] and name in body["detail"]


def test_a_date_filter_offset_is_applied(owner, runs):
    """Offsets up to 14 hours (the furthest time zones) are taken and applied."""
    created = runs["done"].created_at
    at = created.astimezone(timezone(timedelta(hours=14)))
    assert at.isoformat().endswith("+14:00")
    listed = owner.get(f"{API}runs/", {"created_after": at.isoformat()}).json()
    assert str(runs["done"].pk) in [r["id"] for r in listed["results"]]
    later = (created + timedelta(microseconds=1)).astimezone(timezone(timedelta(hours=-12)))
    listed = owner.get(f"{API}runs/", {"created_after": later.isoformat()}).json()
    assert str(runs["done"].pk) not in [r["id"] for r in listed["results"]]


# --- fuzzing every filter of runs/ -----------------------------------------------------------

RUNS_PARAMETERS = ["workflow", "status", "owner", "created_after", "created_before", "page",
                   "page_size", "paginate", "cursor"]


def iso_like():
    """Texts shaped like ISO 8601 times: real times (years 1-9999) with offsets up to 30
    hours either way, and malformed ones (years 0-99999, months 0-13, hours 0-25,
    fractions of any length, offsets up to 30:99)."""
    offset = st.one_of(st.sampled_from(["", "Z", "z", "+00", "-0530"]), st.builds(
        "{}{:02d}:{:02d}".format, st.sampled_from("+-"), st.integers(0, 30),
        st.integers(0, 99)))
    real = st.builds("{}{}".format, st.datetimes().map(lambda d: d.isoformat()), offset)
    malformed = st.builds(
        "{:04d}-{:02d}-{:02d}{}{:02d}:{:02d}:{:02d}{}{}".format,
        st.integers(0, 99999), st.integers(0, 13), st.integers(0, 32),
        st.sampled_from(["T", " ", "t"]), st.integers(0, 25), st.integers(0, 61),
        st.integers(0, 61), st.sampled_from(["", ".5", ".123456", ".1234567890123"]), offset)
    return st.one_of(real, malformed)


def cursors():
    """Cursors as DRF encodes them (base64 of o=&r=&p=), with any offset and position."""
    position = st.one_of(iso_like(), st.text(max_size=20))
    tokens = st.fixed_dictionaries({}, optional={
        "o": st.integers(-5, 10**30).map(str), "r": st.sampled_from(["0", "1", "x"]),
        "p": position})
    return tokens.map(lambda t: b64encode(urlencode(t).encode()).decode())


QUERY_VALUES = st.one_of(
    st.text(max_size=40), iso_like(), cursors(), st.integers(-2**70, 2**70).map(str),
    st.sampled_from(["", "0", "1", "2", "500", "501", "failed", "completed", "sequential",
                     "cursor", "page", "last", "1e400", "NaN", "\x00", "\u0661"]),
)


def assert_a_list_or_a_json_error(response, query):
    assert response.status_code in (200, 400, 404), (query, response.content)
    assert response["Content-Type"] == "application/json", query
    body = response.json()
    if response.status_code == 200:
        assert set(body) == {"count", "count_is_estimate", "next", "previous", "results"}
    else:
        assert isinstance(body["detail"], str) and body["code"], (query, body)
        if response.status_code == 400:
            assert set(body["errors"]) <= set(query), (query, body)


@pytest.mark.parametrize("name", RUNS_PARAMETERS)
@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(iso_like(), QUERY_VALUES))
def test_fuzzed_runs_filters_one_at_a_time(staff, runs, name, value):
    """Issue 22: each filter of runs/ (and each paging parameter) on its own, given
    anything: a 200 page, a 400 naming it or a 404 past the end; never a 5xx, always JSON.
    (On PostgreSQL a 500 there would also abort the test's transaction.)"""
    query = {name: value}
    if name == "cursor":
        query["paginate"] = "cursor"
    assert_a_list_or_a_json_error(staff.get(f"{API}runs/", query), query)


@pytest.mark.parametrize("who", ["owner", "staff"])
@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.dictionaries(
    # The filters, DRF's format, and names the route does not take.
    st.sampled_from([*RUNS_PARAMETERS, "format", "ordering", "search", "limit", "offset"]),
    QUERY_VALUES, max_size=5))
def test_fuzzed_runs_filters_together(request, runs, who, query):
    """The same, several parameters at once, as the owner (their runs) and as staff."""
    client = request.getfixturevalue(who)
    assert_a_list_or_a_json_error(client.get(f"{API}runs/", query), query)


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(["steps", "history", "timeline"]), query=st.dictionaries(
    st.sampled_from(["page", "page_size", "cursor"]), QUERY_VALUES, max_size=3))
def test_fuzzed_paging_of_a_runs_parts_never_answers_5xx(owner, runs, route, query):
    response = owner.get(f"{API}runs/{runs['failed'].pk}/{route}/", query)
    assert response.status_code in (200, 400, 404), (query, response.content)
    assert response["Content-Type"] == "application/json", query
    assert response.json()


# --- durations that do not parse ---------------------------------------------------------------


@pytest.mark.parametrize(("workflow", "data", "shown"), [
    ("naps", {"nap": "forever"}, "'forever'"),
    ("naps", {"nap": -1}, "-1"),
    ("naps", {"nap": "5 parsecs"}, "'5 parsecs'"),
    ("naps", {"nap": "100000w"}, "100 years"),
    ("naps", {"nap": [1]}, "[1]"),
    ("needs_approval", {"expiry": "soon"}, "'soon'"),
    ("needs_approval", {"expiry": "1e400"}, "'1e400'"),
])
def test_durations_that_do_not_parse_fail_the_run_naming_them(owner, workflow, data, shown):
    response = owner.post(f"{API}workflows/{workflow}/run/", {"data": data}, format="json")
    body = assert_error(response, 422, "DEFINITION_ERROR")
    assert shown in body["detail"]
    run = WorkflowRun.objects.get(pk=body["id"])
    assert run.status == "failed"
    # Neither the sleep nor the gate was recorded.
    assert not WorkflowStep.objects.filter(run=run, step_name__in=(
        "Nap", "__workflow_approval:Manager sign-off")).exists()
