"""OpenTelemetry traces (pikku_workflows.tracing) with the SDK's in-memory exporter: the
inline executor, and the rq executor's jobs drained in this process. Real pikku_worker
subprocesses: tests/integration/test_tracing_on_workers.py."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from opentelemetry import trace

import pikku_workflows as pw
from pikku_workflows import tracing
from pikku_workflows.conf import pikku_settings
from pikku_workflows.engine import trace_hooks
from pikku_workflows.engine.steps import invocation_id
from pikku_workflows.exceptions import WorkflowConfigurationError
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain_queues, fake_clock
from tests.spans import finished, memory_exporter

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans():
    """Tracing on in this process; the exporter of its finished spans."""
    exporter = memory_exporter()
    with override_settings(PIKKU_WORKFLOWS={"DEFAULT_RETRY_DELAY": 0, "TRACING": True}):
        tracing.install()
        try:
            yield exporter
        finally:
            tracing.uninstall()


def started_in_a_request(name: str, data: dict, **options):
    """Start a run inside a span, as a traced web request would; return (run, span)."""
    with trace.get_tracer("tests").start_as_current_span("POST /orders") as request:
        run = pw.start_workflow(name, data, **options)
    return run, request.get_span_context()


def ref(context) -> str:
    return f"{context.trace_id:032x}-{context.span_id:016x}"


def named(records, prefix):
    return [r for r in records if r["name"].startswith(prefix)]


def event_names(span):
    return [(name, attributes.get("pikku.step")) for name, attributes in span["events"]]


def test_a_run_sleeping_across_two_passes_has_two_pass_spans_linked_to_its_start(spans):
    with fake_clock():
        run, request = started_in_a_request("traced_sleeper", {"n": 3}, inline=True)
    assert run.status == "completed"
    # The start's W3C context is stored on the run.
    stored = WorkflowRun.objects.get(pk=run.pk).trace_context
    assert stored["traceparent"].startswith(f"00-{request.trace_id:032x}-{request.span_id:016x}-")

    records = finished(spans)
    passes = named(records, "pikku.pass ")
    assert [p["name"] for p in passes] == ["pikku.pass traced_sleeper"] * 2
    assert [p["attributes"]["pikku.outcome"] for p in passes] == ["paused", "completed"]
    # Each pass is the root of a trace of its own, linked to the start (not its child).
    for span in passes:
        assert span["parent_id"] is None
        assert span["links"] == [ref(request)]
        assert span["attributes"]["pikku.run_id"] == str(run.pk)
    assert len({p["trace_id"] for p in passes} | {f"{request.trace_id:032x}"}) == 3

    first, second = passes
    steps = named(records, "pikku.step ")
    # Fetch ran once (first pass), Ship once (second): the replay made no second span.
    assert [(s["name"], s["parent_id"]) for s in steps] == [
        ("pikku.step Fetch", first["span_id"]), ("pikku.step Ship", second["span_id"])]
    fetch = steps[0]
    assert fetch["trace_id"] == first["trace_id"]
    assert fetch["status"] == "UNSET"
    assert fetch["attributes"] == {
        "pikku.run_id": str(run.pk), "pikku.workflow": "traced_sleeper",
        "pikku.step": "Fetch", "pikku.function": "tr_fetch", "pikku.attempt": 1,
        "pikku.queued": False, "pikku.invocation_id": invocation_id(run.pk, "Fetch"),
        "pikku.outcome": "succeeded"}
    # The sleep is an event of the first pass; the replayed step one of the second.
    assert event_names(first) == [("pikku.sleep", "Nap")]
    assert ("pikku.step.replayed", "Fetch") in event_names(second)
    assert ("pikku.step.replayed", "Ship") not in event_names(second)
    sleep = first["events"][0][1]
    assert sleep["pikku.until"].startswith(str(run.created_at.year))


def test_failed_attempts_have_the_error_status(spans):
    run, _ = started_in_a_request("traced_flaky", {}, inline=True)
    assert run.status == "completed"
    failed, succeeded = named(finished(spans), "pikku.step ")
    assert (failed["attributes"]["pikku.attempt"], succeeded["attributes"]["pikku.attempt"]) \
        == (1, 2)
    assert failed["status"] == "ERROR"
    assert failed["attributes"]["pikku.outcome"] == "retried"
    assert failed["events"] == [("exception", {"exception.type": "ConnectionError",
                                               "exception.message": "the first attempt fails"})]
    assert succeeded["status"] == "UNSET"
    assert succeeded["attributes"]["pikku.outcome"] == "succeeded"
    # Both attempts ran in the one pass.
    (only_pass,) = named(finished(spans), "pikku.pass ")
    assert failed["parent_id"] == succeeded["parent_id"] == only_pass["span_id"]

    spans.clear()
    run, _ = started_in_a_request("traced_broken", {}, inline=True)
    assert run.status == "failed"
    records = finished(spans)
    assert [(s["attributes"]["pikku.outcome"], s["status"])
            for s in named(records, "pikku.step ")] == [("retried", "ERROR"),
                                                        ("failed", "ERROR")]
    (failed_pass,) = named(records, "pikku.pass ")
    assert failed_pass["attributes"]["pikku.outcome"] == "failed"
    assert failed_pass["status"] == "ERROR"


def test_a_child_run_keeps_its_parents_pass_as_its_start(spans):
    run, request = started_in_a_request("traced_parent", {"n": 2}, inline=True)
    assert run.status == "completed"
    child = WorkflowRun.objects.get(parent_run=run)
    records = finished(spans)
    parent_pass = next(s for s in records if s["name"] == "pikku.pass traced_parent")
    child_pass = next(s for s in records if s["name"] == "pikku.pass traced_child")
    assert child.trace_context["traceparent"].startswith(
        f"00-{parent_pass['trace_id']}-{parent_pass['span_id']}-")
    assert child_pass["parent_id"] is None  # a trace of its own...
    assert child_pass["links"] == [f"{parent_pass['trace_id']}-{parent_pass['span_id']}"]
    assert parent_pass["links"] == [ref(request)]  # ...linked to its parent's pass
    (child_step,) = named(records, "pikku.step ")
    assert child_step["parent_id"] == child_pass["span_id"]


def test_waits_are_events(spans):
    run, _ = started_in_a_request("traced_waiter", {"key": "order-1"}, inline=True)
    assert run.status == "suspended"
    (first,) = named(finished(spans), "pikku.pass ")
    assert first["attributes"]["pikku.outcome"] == "suspended"
    ((name, attributes),) = first["events"]
    assert name == "pikku.wait"
    assert {k: v for k, v in attributes.items() if k != "pikku.until"} == {
        "pikku.step": "Payment", "pikku.wait.kind": "event", "pikku.wait.name": "tr.paid",
        "pikku.wait.key": "order-1"}
    spans.clear()
    pw.send_event("tr.paid", {"ok": True}, key="order-1")
    run.refresh_from_db()
    assert run.status == "completed"
    (second,) = named(finished(spans), "pikku.pass ")
    assert second["events"] == []  # the wait ended in this pass: recorded, not replayed


def test_queued_steps_on_the_rq_executor_are_spans_linked_to_the_start(spans, redis_conn):
    with override_settings(PIKKU_WORKFLOWS={"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0,
                                            "EAGER_QUEUED_STEPS": False, "TRACING": True}):
        run, request = started_in_a_request("traced_queued", {"fail_first": True,
                                                               "nap": 0})
        drain_queues()
    run.refresh_from_db()
    assert run.status == "completed"
    records = finished(spans)
    remote = [s for s in records if s["name"] == "pikku.step Remote"]
    # Two attempts, each run by a step worker: roots linked to the run's start.
    assert [(s["attributes"]["pikku.attempt"], s["status"], s["attributes"]["pikku.queued"])
            for s in remote] == [(1, "ERROR", True), (2, "UNSET", True)]
    for span in remote:
        assert span["parent_id"] is None
        assert span["links"] == [ref(request)]
    passes = named(records, "pikku.pass ")
    assert len(passes) >= 2
    assert all(p["links"] == [ref(request)] and p["parent_id"] is None for p in passes)
    assert passes[-1]["attributes"]["pikku.outcome"] == "completed"
    replays = [p for p in passes if ("pikku.step.replayed", "Remote") in event_names(p)]
    assert replays  # the passes after the step replay it: events, not spans


def test_tracing_off_stores_nothing_and_traces_nothing(spans):
    tracing.uninstall()
    assert trace_hooks.current is None
    run, _ = started_in_a_request("traced_flaky", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run.pk).trace_context is None
    assert [s["name"] for s in finished(spans)] == ["POST /orders"]


def test_a_run_started_outside_any_span_has_unlinked_passes(spans):
    run = pw.start_workflow("traced_flaky", {}, inline=True)
    assert WorkflowRun.objects.get(pk=run.pk).trace_context is None
    (only_pass,) = named(finished(spans), "pikku.pass ")
    assert only_pass["links"] == []


def test_tracing_without_opentelemetry_is_a_clear_error(monkeypatch):
    tracing.uninstall()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(ImproperlyConfigured, match=r"pikku-workflows\[otel\]"):
        tracing.install()
    assert not tracing.installed()


def test_the_setting_is_a_bool():
    with override_settings(PIKKU_WORKFLOWS={"TRACING": "yes"}), \
            pytest.raises(WorkflowConfigurationError, match="TRACING"):
        _ = pikku_settings.TRACING
