"""A client generated from the API's schema (openapi-python-client) works: generated
without a warning, imported, and driven through an operator's whole flow against the
project's WSGI app, every answer parsed into the generated models."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from rest_framework.authtoken.models import Token

from tests.api.test_schema import api_schema

PACKAGE = "pikku_generated_client"


@pytest.fixture(scope="module")
def client_package(tmp_path_factory):
    """The client package generated from the schema, imported (once for the module)."""
    root = tmp_path_factory.mktemp("client")
    schema_file = root / "schema.json"
    schema_file.write_text(json.dumps(api_schema()))
    config = root / "config.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run on the generated code
    generator = Path(sys.executable).parent / "openapi-python-client"
    result = subprocess.run(
        [str(generator), "generate", "--path", str(schema_file), "--meta", "none",
         "--output-path", str(root / PACKAGE), "--config", str(config), "--fail-on-warning"],
        capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Warning" not in result.stdout + result.stderr, result.stdout + result.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


@pytest.fixture
def wsgi_app(settings):
    """The project's WSGI app, in-process, without closing the test's database connection
    after each request."""
    settings.ALLOWED_HOSTS = ["testserver"]
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _api(package, module):
    return importlib.import_module(f"{package.__name__}.api.workflows.{module}")


@pytest.mark.django_db
def test_an_operator_drives_runs_through_the_generated_client(client_package, wsgi_app,
                                                              users):
    models = importlib.import_module(f"{PACKAGE}.models")
    operator = users["staff"]  # staff holding every run permission
    client = client_package.AuthenticatedClient(
        base_url="http://testserver", token=Token.objects.create(user=operator).key,
        prefix="Token", raise_on_unexpected_status=True,
        httpx_args={"transport": httpx.WSGITransport(app=wsgi_app)})

    def call(module, **kwargs):
        """The operation's answer, parsed into its model (never None: no raise either)."""
        response = _api(client_package, module).sync_detailed(client=client, **kwargs)
        assert response.parsed is not None, (module, response.status_code, response.content)
        assert not isinstance(response.parsed, models.Error), (module, response.parsed)
        return response

    workflows = call("list_workflows").parsed
    assert "needs_approval" in {workflow.name for workflow in workflows}
    detail = call("get_workflow", name="needs_approval").parsed
    assert isinstance(detail, models.WorkflowDetail)
    assert detail.planned_steps

    # Start with an idempotency key; the same start again is a replay (200, same run).
    body = models.StartBody(data={}, idempotency_key="order-42")
    started = call("start_run", name="needs_approval", body=body)
    assert started.status_code == 202
    gated = started.parsed.id
    assert isinstance(gated, uuid.UUID)
    replay = call("start_run", name="needs_approval", body=body)
    assert (replay.status_code, replay.parsed.id) == (200, gated)
    assert replay.headers["Idempotent-Replayed"] == "true"

    runs = call("list_runs", workflow="needs_approval",
                status=models.ListRunsStatus(started.parsed.status.value)).parsed
    assert [run.id for run in runs.results] == [gated]
    assert runs.count == 1 and runs.count_is_estimate is False
    run = call("get_run", id=gated).parsed
    assert isinstance(run, models.RunDetail) and run.owner == operator.pk
    assert call("list_run_steps", id=gated).parsed.results
    assert call("get_run_history", id=gated).parsed.results
    events = call("get_run_timeline", id=gated).parsed.results
    assert all(event.at.tzinfo is not None for event in events)  # date-time, parsed

    inbox = call("list_approvals").parsed
    gate = next(item for item in inbox.results if item.run == gated)
    answer = call("approve_run", id=gated, body=models.ApproveBody(
        reason=gate.reason, decision={"approved": True})).parsed
    assert answer.status == models.PikkuApprovalOutcome.DECIDED
    assert call("get_run", id=gated).parsed.status == models.PikkuRunStatus.COMPLETED

    # A suspended run: resumed at its first gate, cancelled at its second, then deleted.
    suspended = call("start_run", name="two_gates", body=models.StartBody(data={})).parsed.id
    resumed = call("resume_run", id=suspended, body=models.ResumeBody(data="dock 4")).parsed
    assert resumed.status == models.PikkuRunStatus.SUSPENDED
    cancelled = call("cancel_run", id=suspended,
                     body=models.CancelBody(reason="courier unavailable")).parsed
    assert cancelled.status == models.PikkuRunStatus.CANCELLED
    deleted = _api(client_package, "delete_run").sync_detailed(client=client, id=suspended)
    assert deleted.status_code == 204  # no content: nothing to parse

    # A failed run, retried (it fails again: it fails more times than it is retried).
    failed = call("start_run", name="retrying",
                  body=models.StartBody(data={"fail_times": 5, "retries": 0})).parsed
    assert failed.status == models.PikkuRunStatus.FAILED
    retried = call("retry_run", id=failed.id, body=models.RetryRunBody()).parsed
    assert isinstance(retried, models.RunDetail) and retried.id == failed.id

    # run/: inline, with the output.
    outcome = call("run_workflow", name="sequential",
                   body=models.RunBody(data={"x": 1}, timeout=10)).parsed
    assert outcome.status == models.PikkuRunStatus.COMPLETED

    # stream/: its schema describes one SSE event (as schemathesis, which checks each
    # event, and OpenAPI 3.2's itemSchema read it), while openapi-python-client reads a
    # response schema as the whole body and its stream_run fails to parse the text; so the
    # client's own HTTP session reads it. A finished run's stream: one update, then done.
    streamed = client.get_httpx_client().get(f"/api/workflows/runs/{gated}/stream/")
    assert streamed.status_code == 200
    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    assert b"event: update" in streamed.content and b"event: done" in streamed.content
