"""start/'s flow control (DESIGN 8.4): ``run_timeout`` and ``debounce`` in the body and the
schema, a queued or skipped start under a workflow's concurrency, refused bodies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from drf_spectacular.generators import SchemaGenerator

from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import fake_clock, run_inline

from .conftest import API

pytestmark = pytest.mark.django_db

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock():
    with fake_clock(T0) as fake, run_inline():
        yield fake


def start(client, name, body):
    return client.post(f"{API}workflows/{name}/start/", body, format="json")


def test_run_timeout_sets_the_run_s_deadline(owner, clock):
    answer = start(owner, "flow_waits", {"data": "suspend", "run_timeout": "30min"})
    assert answer.status_code == 202, answer.content
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    assert run.deadline_at == T0 + timedelta(minutes=30) and run.run_timeout == 1800
    clock.advance("31min")
    detail = owner.get(f"{API}runs/{run.pk}/").json()
    assert detail["status"] == "failed" and detail["error"]["code"] == "DEADLINE_EXCEEDED"


def test_debounced_starts_answer_the_one_waiting_run(owner, clock):
    ids = set()
    for n in range(5):
        answer = start(owner, "flow_echo", {"data": n, "debounce": {"key": "doc",
                                                                    "period": "10s"}})
        assert answer.status_code == 202 and answer.json()["status"] == "scheduled"
        ids.add(answer.json()["id"])
        clock.advance("1s")
    assert len(ids) == 1
    clock.advance("10s")
    run = WorkflowRun.objects.get(pk=ids.pop())
    assert (run.status, run.output) == ("completed", 4)


def test_a_start_under_a_held_concurrency_slot_is_queued_or_skipped(owner, clock):
    first = start(owner, "flow_per_customer", {"data": {"customer": "c", "n": 1}})
    queued = start(owner, "flow_per_customer", {"data": {"customer": "c", "n": 2}})
    assert first.json()["status"] == "suspended"
    assert queued.status_code == 202 and queued.json()["status"] == "scheduled"
    start(owner, "flow_skips", {"data": {"k": 1}})
    skipped = start(owner, "flow_skips", {"data": {"k": 1}})
    assert skipped.status_code == 202 and skipped.json()["status"] == "cancelled"
    detail = owner.get(f"{API}runs/{skipped.json()['id']}/").json()
    assert detail["error"]["code"] == "CONCURRENCY_LIMITED"


@pytest.mark.parametrize(("body", "field"), [
    ({"run_timeout": 0}, "run_timeout"),
    ({"run_timeout": "soon"}, "run_timeout"),
    ({"run_timeout": True}, "run_timeout"),
    ({"debounce": {"period": "5s"}}, "debounce"),
    ({"debounce": {"key": ""}}, "debounce"),
    ({"debounce": {"key": "k" * 256}}, "debounce"),
    ({"debounce": {"key": "k", "period": 0}}, "debounce"),
    ({"debounce": {"key": "k", "when": 1}}, "debounce"),
    ({"debounce": {"key": "k"}, "delay": "1min"}, "debounce"),
    ({"debounce": {"key": "k"}, "idempotency_key": "i"}, "debounce"),
])
def test_bad_flow_control_bodies_are_refused_and_nothing_is_written(owner, clock, body,
                                                                     field):
    answer = start(owner, "flow_echo", {"data": 1, **body})
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"], answer.json()
    assert not WorkflowRun.objects.exists()


def test_a_key_missing_from_the_input_is_a_400_naming_it(owner, clock):
    answer = start(owner, "flow_per_customer", {"data": {"n": 1}})
    assert answer.status_code == 400
    assert "concurrency key path 'customer' is missing" in answer.json()["detail"]
    assert not WorkflowRun.objects.exists()


def test_the_schema_documents_run_timeout_and_debounce():
    generated = SchemaGenerator().get_schema(request=None, public=True)
    schemas = generated["components"]["schemas"]
    start_body = schemas["StartBody"]["properties"]
    assert {"run_timeout", "debounce"} <= set(start_body)
    timeout = start_body["run_timeout"]
    assert timeout["nullable"] and {"number", "string"} == {
        each["type"] for each in timeout["oneOf"]}
    debounce = schemas["DebounceBody"]
    assert debounce["required"] == ["key"] and debounce["additionalProperties"] is False
    assert set(debounce["properties"]) == {"key", "period", "max_wait"}
