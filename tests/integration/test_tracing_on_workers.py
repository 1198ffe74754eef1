"""OpenTelemetry traces of runs on real ``pikku_worker`` subprocesses (rq executor).

The workers run with ``TRACING`` on and the SDK's ``SimpleSpanProcessor`` writing each
finished span as a JSON line to a file (``PIKKU_TEST_SPAN_FILE``, read by
``tests/settings.py``, exporter in ``tests/spans.py``): a real exporter in the worker
processes, read back here. The run starts in this process inside a span, as a traced web
request would, so its stored context is that span's.
"""

from __future__ import annotations

import pytest
from django.test import override_settings
from opentelemetry import trace

import pikku_workflows as pw
from pikku_workflows import tracing
from pikku_workflows.models import WorkflowRun
from tests.processes import wait_until
from tests.services import SETTINGS, Workers
from tests.spans import memory_exporter, read_file


@pytest.fixture
def traced_workers(rq_settings, tmp_path, monkeypatch):
    path = tmp_path / "spans.jsonl"
    monkeypatch.setenv("PIKKU_TEST_SPAN_FILE", str(path))
    # Queued steps go through Redis to a step worker (not run eagerly by the pass).
    settings = {**SETTINGS, "TRACING": True, "EAGER_QUEUED_STEPS": False}
    pool = Workers(settings)
    tracing.install()
    try:
        with override_settings(PIKKU_WORKFLOWS=settings):
            pool.start(2)
            yield path
    finally:
        tracing.uninstall()
        pool.close()


def test_passes_and_queued_steps_on_workers(traced_workers):
    memory_exporter()  # this process's spans (the request's) go to memory
    with trace.get_tracer("tests").start_as_current_span("POST /orders") as request:
        run = pw.start_workflow("traced_queued", {"fail_first": True, "nap": "1s"})
    start = f"{request.get_span_context().trace_id:032x}-" \
            f"{request.get_span_context().span_id:016x}"
    assert WorkflowRun.objects.get(pk=run.pk).trace_context["traceparent"].startswith(
        f"00-{start}-")

    def done():
        spans = read_file(traced_workers)
        return spans if any(s["name"] == "pikku.pass traced_queued"
                            and s["attributes"].get("pikku.outcome") == "completed"
                            for s in spans) else None

    spans = wait_until(done, timeout=60, interval=0.1, what="the run's last pass span")
    run.refresh_from_db()
    assert run.status == "completed"

    passes = [s for s in spans if s["name"] == "pikku.pass traced_queued"]
    # The first dispatches the step, the next reaches the sleep, the last ends the run
    # (a worker may also find the run busy, which is no pass: no span).
    assert len(passes) >= 3
    for span in passes:
        assert span["parent_id"] is None and span["links"] == [start]
    assert len({span["trace_id"] for span in passes}) == len(passes)

    remote = [s for s in spans if s["name"] == "pikku.step Remote"]
    # One span per executed attempt, none for the replays of the passes after it.
    assert [(s["attributes"]["pikku.attempt"], s["status"],
             s["attributes"]["pikku.outcome"]) for s in remote] == [
        (1, "ERROR", "retried"), (2, "UNSET", "succeeded")]
    for span in remote:
        assert span["parent_id"] is None and span["links"] == [start]
        assert span["attributes"]["pikku.queued"] is True
    replayed = [p for p in passes
                if ["pikku.step.replayed", {"pikku.step": "Remote",
                                            "pikku.function": "tr_remote"}] in p["events"]]
    assert len(replayed) >= 2  # the sleep's pass and the last one
    slept = [p for p in passes if any(e[0] == "pikku.sleep" for e in p["events"])]
    assert slept and all(p["events"][-1][1]["pikku.step"] == "Nap" for p in slept)
