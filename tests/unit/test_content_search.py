"""Search runs by content: JSON containment on input and output, with PostgreSQL's ``@>``
semantics on both databases (a reference implementation here decides what must match),
in the console's search box and as the API's ``input__contains``/``output__contains``."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from pikku_workflows.content_search import (
    ContentQueryError,
    filter_contains,
    parse_pattern,
    parse_search,
)
from pikku_workflows.models import WorkflowRun
from tests.conftest import API

pytestmark = pytest.mark.django_db

#: Inputs (and outputs) chosen to tell the semantics apart: types, nesting, nulls, arrays.
CORPUS = [
    {"order_id": 8, "customer": {"email": "ada@example.com", "vip": True}},
    {"order_id": 8.0, "customer": {"email": "bob@example.com", "vip": False}},
    {"order_id": "8", "customer": {"email": "ada@example.com"}},
    {"order_id": 9, "customer": None, "tags": ["a", "b"]},
    {"order_id": 1, "customer": {"email": "ada@example.com", "address": {"city": "Paris"}}},
    {"order_id": True, "note": None},
    {"order id": 3, "a.b": 4, "total": 12.5},
    {"café": "crème", 'a"b': {"c\\d": 1}, "\u0011": -2},
    [1, 2, 3],
    "order_id",
    None,
]

PATTERNS = [
    {"order_id": 8},
    {"order_id": 8.0},
    {"order_id": "8"},
    {"order_id": True},
    {"order_id": 1},
    {"customer": {"email": "ada@example.com"}},
    {"customer": {"vip": False}},
    {"customer": None},
    {"note": None},
    {"missing": None},
    {"customer": {"address": {"city": "Paris"}}},
    {"customer": {"email": "ada@example.com", "vip": True}},
    {"order id": 3},
    {"a.b": 4},
    {"total": 12.5},
    {"order_id": 8, "customer": {"email": "bob@example.com"}},
    {"café": "crème"},
    {'a"b': {"c\\d": 1}},
    {"\u0011": -2.0},
    {"customer": {"email": "ada@example.com", "vip": True}, "order_id": 8},
]


def contains(value: object, pattern: object) -> bool:
    """PostgreSQL's ``value @> pattern`` for the shapes the search takes."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            key in value and contains(value[key], item) for key, item in pattern.items())
    if isinstance(pattern, bool) or isinstance(value, bool):
        return type(pattern) is type(value) and pattern == value
    if isinstance(pattern, (int, float)):
        return isinstance(value, (int, float)) and value == pattern
    return type(pattern) is type(value) and pattern == value


@pytest.fixture
def corpus():
    return [WorkflowRun.objects.create(workflow="search", input=value, output={"echo": value})
            for value in CORPUS]


@pytest.mark.parametrize("pattern", PATTERNS, ids=json.dumps)
def test_input_containment_matches_postgresql_semantics(corpus, pattern):
    expected = {run.pk for run in corpus if contains(run.input, pattern)}
    found = set(filter_contains(WorkflowRun.objects.all(), "input", pattern)
                .values_list("pk", flat=True))
    assert found == expected
    wrapped = set(filter_contains(WorkflowRun.objects.all(), "output", {"echo": pattern})
                  .values_list("pk", flat=True))
    assert wrapped == expected


@pytest.mark.postgres_only
def test_the_reference_semantics_are_postgresqls(corpus):
    """On PostgreSQL, the reference above agrees with the ``@>`` operator itself."""
    for pattern in PATTERNS:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM pikku_workflows_workflowrun WHERE input @> %s",
                           [json.dumps(pattern)])
            found = {row[0] for row in cursor.fetchall()}
        assert found == {run.pk for run in corpus if contains(run.input, pattern)}, pattern


@pytest.mark.parametrize("text, message", [
    ("[1]", "must be a JSON object"),
    ("8", "must be a JSON object"),
    ("{}", "empty object"),
    ('{"a": {}}', "empty object"),
    ('{"a": [1]}', "arrays are not supported"),
    ('{"a": NaN}', "not a JSON value"),
    ('{"a": 1', "not valid JSON"),
    ('{"a": 99999999999999999999}', "out of range"),
    ("[" * 100_000, "nested too deeply"),
])
def test_patterns_outside_the_supported_shapes_are_refused(text, message):
    with pytest.raises(ContentQueryError, match=message):
        parse_pattern(text)


def test_search_syntax():
    assert parse_search("order_id=8") == {"input": {"order_id": 8}}
    assert parse_search('customer.email=ada@example.com code="8" ok=true none=null') == {
        "input": {"customer": {"email": "ada@example.com"}, "code": "8", "ok": True,
                  "none": None}}
    assert parse_search("input.a=1 output.total=12.5 output.x.y=z") == {
        "input": {"a": 1}, "output": {"total": 12.5, "x": {"y": "z"}}}
    assert parse_search("input.input=1") == {"input": {"input": 1}}
    assert parse_search('name="Ada Lovelace"') == {"input": {"name": "Ada Lovelace"}}
    for bad, message in [("order_id", "not key=value"), ("a=1 b", "not key=value"),
                         ("a..b=1", "empty"), ("a=1 a=2", "twice"), ("a=1 a.b=2", "conflicts"),
                         ('a="x', "quotes"), ("a=[1]", "arrays")]:
        with pytest.raises(ContentQueryError, match=message):
            parse_search(bad)


# --- The console's search box -----------------------------------------------------------------


def shown(client, term: str) -> str:
    url = reverse("admin:pikku_workflows_workflowrun_changelist")
    return client.get(f"{url}?{urlencode({'q': term})}").content.decode()


def test_console_search_box_finds_runs_by_content(admin_client, corpus):
    body = shown(admin_client, "customer.email=ada@example.com")
    ids = {str(run.pk)[:8] for run in corpus if contains(run.input, {
        "customer": {"email": "ada@example.com"}})}
    assert len(ids) == 3
    assert all(short in body for short in ids)
    assert sum(str(run.pk)[:8] in body for run in corpus) == 3
    body = shown(admin_client, 'order_id="8"')
    assert [str(run.pk)[:8] in body for run in corpus].count(True) == 1
    body = shown(admin_client, "output.echo.total=12.5")
    assert str(corpus[6].pk)[:8] in body
    assert sum(str(run.pk)[:8] in body for run in corpus) == 1


def test_console_search_box_says_what_is_wrong(admin_client, corpus):
    body = shown(admin_client, "tags=[1]")
    assert "Search by content: arrays are not supported" in body
    assert not any(str(run.pk)[:8] in body for run in corpus)


def test_console_content_search_costs_the_same_queries(admin_client, corpus):
    def count(term):
        with CaptureQueriesContext(connection) as captured:
            shown(admin_client, term)
        return len(captured)

    small = count("order_id=8")
    WorkflowRun.objects.bulk_create([WorkflowRun(workflow="search", input={"order_id": 8})
                                     for _ in range(60)])
    assert count("order_id=8") == small


# --- The API filters ----------------------------------------------------------------------------


def api_ids(client, **params) -> tuple[int, object]:
    response = client.get(f"{API}runs/", params)
    body = response.json()
    if response.status_code != 200:
        return response.status_code, body
    return 200, {row["id"] for row in body["results"]}


def test_api_input_and_output_contains(staff, corpus):
    pattern = {"customer": {"email": "ada@example.com"}}
    expected = {str(run.pk) for run in corpus if contains(run.input, pattern)}
    assert api_ids(staff, input__contains=json.dumps(pattern)) == (200, expected)
    assert api_ids(staff, output__contains=json.dumps({"echo": pattern})) == (200, expected)
    both = {str(run.pk) for run in corpus if contains(run.input, {"order_id": 8})} & expected
    assert api_ids(staff, input__contains='{"order_id": 8}',
                   output__contains=json.dumps({"echo": pattern})) == (200, both)
    assert api_ids(staff, input__contains="") == (200, {str(run.pk) for run in corpus})
    # Text no run can hold (jsonb has no NUL) matches nothing, on both databases.
    assert api_ids(staff, input__contains='{"a\\u0000": "\\ud800"}') == (200, set())


@pytest.mark.parametrize("value, message", [
    ("not json", "not valid JSON"), ("[1]", "must be a JSON object"),
    ('{"a": [1]}', "arrays are not supported"), ("{}", "empty object"),
    ('{"a": "' + "x" * 5000 + '"}', "at most 4000 characters")
])
def test_api_refuses_an_invalid_pattern_with_a_clear_400(staff, corpus, value, message):
    status, body = api_ids(staff, input__contains=value)
    assert status == 400
    assert message in json.dumps(body["errors"]["input__contains"])


def test_api_schema_documents_the_content_filters(staff):
    schema = staff.get("/api/schema/", {"format": "json"}).json()
    params = {p["name"]: p for p in schema["paths"]["/api/workflows/runs/"]["get"]["parameters"]}
    for name in ("input__contains", "output__contains"):
        assert "@>" in params[name]["description"]
        assert params[name]["content"]["application/json"]["schema"]["type"] == "object"
