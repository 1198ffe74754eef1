"""The OpenAPI schema: every route in it, with the shapes, formats and error statuses it
answers; it generates without a warning in a project without SPECTACULAR_SETTINGS; and
schemathesis, with all its checks, finds no answer that breaks it, in its coverage,
fuzzing and stateful phases, as a run's owner and as an operator (fixed seeds)."""

from __future__ import annotations

import inspect
import io
import json
import re

import hypothesis
import pytest
import schemathesis
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck
from rest_framework.authtoken.models import Token
from schemathesis.config import SchemathesisConfig

from pikku_workflows.api import stream, views
from pikku_workflows.models import WorkflowRun
from tests.conftest import runs_in_each_state

OPERATIONS = {
    ("get", "/api/workflows/workflows/"), ("get", "/api/workflows/workflows/{name}/"),
    ("post", "/api/workflows/workflows/{name}/start/"),
    ("post", "/api/workflows/workflows/{name}/run/"),
    ("get", "/api/workflows/runs/"), ("get", "/api/workflows/runs/{id}/"),
    ("delete", "/api/workflows/runs/{id}/"), ("get", "/api/workflows/runs/{id}/steps/"),
    ("get", "/api/workflows/runs/{id}/history/"), ("get", "/api/workflows/runs/{id}/timeline/"),
    ("get", "/api/workflows/runs/{id}/stream/"), ("post", "/api/workflows/runs/{id}/resume/"),
    ("post", "/api/workflows/runs/{id}/cancel/"), ("post", "/api/workflows/runs/{id}/retry/"),
    ("post", "/api/workflows/runs/{id}/approve/"), ("get", "/api/workflows/approvals/"),
    ("post", "/api/workflows/runs/{id}/fork/"),
    ("get", "/api/workflows/schedules/"), ("get", "/api/workflows/schedules/{name}/"),
    ("post", "/api/workflows/schedules/{name}/trigger/"),
    ("post", "/api/workflows/schedules/{name}/pause/"),
    ("post", "/api/workflows/schedules/{name}/resume/"),
    ("post", "/api/workflows/events/"), ("post", "/api/workflows/runs/{id}/messages/"),
    ("get", "/api/workflows/runs/{id}/state/"),
}


def api_schema() -> dict:
    generated = SchemaGenerator().get_schema(request=None, public=True)
    # The API only: the schema view documents itself too.
    generated["paths"] = {path: spec for path, spec in generated["paths"].items()
                          if path.startswith("/api/workflows/")}
    return generated


def operations(generated: dict) -> dict[tuple[str, str], dict]:
    return {(method, path): spec for path, methods in generated["paths"].items()
            for method, spec in methods.items()}


def test_every_route_is_in_the_schema_with_its_error_codes():
    found = operations(api_schema())
    assert set(found) == OPERATIONS
    read, write = {"400", "401", "403"}, {"400", "401", "403", "411", "413", "415"}
    errors = {  # exactly the error statuses each route can answer
        ("get", "/api/workflows/workflows/"): read,
        ("get", "/api/workflows/workflows/{name}/"): read | {"404"},
        ("post", "/api/workflows/workflows/{name}/start/"): write | {"404", "409"},
        ("post", "/api/workflows/workflows/{name}/run/"): write | {"404", "409", "422"},
        ("get", "/api/workflows/runs/"): read | {"404"},
        ("delete", "/api/workflows/runs/{id}/"): {"401", "403", "404", "409"},
        ("get", "/api/workflows/runs/{id}/stream/"): read | {"404", "429"},
        ("get", "/api/workflows/approvals/"): read | {"404"},
        **{("get", f"/api/workflows/runs/{{id}}/{part}"): read | {"404"}
           for part in ("", "steps/", "history/", "timeline/", "state/")},
        **{("post", f"/api/workflows/runs/{{id}}/{action}/"): write | {"404", "409"}
           for action in ("resume", "cancel", "retry", "approve", "fork", "messages")},
        ("post", "/api/workflows/events/"): write | {"409"},
        ("get", "/api/workflows/schedules/"): read | {"404"},
        ("get", "/api/workflows/schedules/{name}/"): read | {"404"},
        **{("post", f"/api/workflows/schedules/{{name}}/{verb}/"): write | {"404"}
           for verb in ("trigger", "pause", "resume")},
    }
    for key, spec in found.items():
        assert {code for code in spec["responses"] if code >= "400"} == errors[key], key
        # Every POST documents its body; retry/ takes an empty object.
        if key[0] == "post":
            body = spec["requestBody"]["content"]
            assert list(body) == ["application/json"], key
    retry = found[("post", "/api/workflows/runs/{id}/retry/")]["requestBody"]
    assert retry["content"]["application/json"]["schema"] == {
        "type": "object", "properties": {}, "additionalProperties": False}
    for replayable in ("/api/workflows/workflows/{name}/start/", "/api/workflows/events/",
                       "/api/workflows/runs/{id}/messages/"):
        assert {"200", "202"} <= set(found[("post", replayable)]["responses"]), replayable


def _descriptions(node, where=""):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield where, value
            else:
                yield from _descriptions(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _descriptions(value, f"{where}/{index}")


def test_each_operation_has_its_own_description_naming_no_internals():
    generated = api_schema()
    docstrings = {inspect.cleandoc(view.__doc__) for view in
                  (views.WorkflowViewSet, views.RunViewSet, views.ApprovalViewSet)}
    for key, spec in operations(generated).items():
        assert spec.get("description"), key
        assert spec.get("summary"), key
    internal = re.compile(r"docs/|DESIGN|\.md\b|\.py\b|pikku_workflows\.|api/\w+\.py")
    for where, text in _descriptions(generated):
        assert inspect.cleandoc(text) not in docstrings, where
        assert not internal.search(text), (where, text)


def test_formats_ids_owners_and_timestamps():
    generated = api_schema()
    components = generated["components"]["schemas"]
    for key, spec in operations(generated).items():
        for parameter in spec.get("parameters", []):
            if parameter["in"] == "path" and parameter["name"] == "id":
                assert parameter["schema"] == {"type": "string", "format": "uuid"}, key
    checked = 0
    for name, component in components.items():
        for field, prop in component.get("properties", {}).items():
            if field == "owner":
                assert prop["type"] == "integer" and prop["nullable"] is True, name
            if field.endswith("_at") or field == "at":
                assert (prop["type"], prop["format"]) == ("string", "date-time"), (name, field)
                checked += 1
            if field in ("id", "run", "parent_run", "child_run") and name != "Sent":
                assert (prop["type"], prop["format"]) == ("string", "uuid"), (name, field)
    assert checked >= 12
    # An event's or message's id is an integer (a row id), not a run's UUID.
    assert components["Sent"]["properties"]["id"]["type"] == "integer"
    # Request bodies refuse keys they do not name, and say so.
    for name in ("StartBody", "RunBody", "ResumeBody", "CancelBody", "ApproveBody", "EventBody",
                 "MessageBody"):
        assert components[name]["additionalProperties"] is False, name


@pytest.mark.parametrize("settings_module", ["tests.settings", "demo_project.settings"])
def test_spectacular_validates_without_warnings(settings, settings_module):
    """``manage.py spectacular --validate --fail-on-warn``, as a project runs it: without
    SPECTACULAR_SETTINGS (drf-spectacular's defaults), and with the demo's."""
    if settings_module == "tests.settings":
        if hasattr(settings, "SPECTACULAR_SETTINGS"):
            del settings.SPECTACULAR_SETTINGS
    else:
        from demo_project import settings as demo

        settings.SPECTACULAR_SETTINGS = demo.SPECTACULAR_SETTINGS
        settings.ROOT_URLCONF = demo.ROOT_URLCONF
    out, err = io.StringIO(), io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json",
                 stdout=out, stderr=err)
    assert err.getvalue() == ""
    generated = json.loads(out.getvalue())
    assert {(m, p) for (m, p) in operations(generated) if p.startswith("/api/workflows/")} \
        == OPERATIONS


def test_lists_are_documented_as_they_answer():
    """Issue 22, defect 6: steps/, history/ and timeline/ were documented as paginated
    with the runs list's filters, and answered bare arrays ignoring them."""
    generated = api_schema()
    paths, components = generated["paths"], generated["components"]["schemas"]

    def params(path):
        return {p["name"] for p in paths[path]["get"].get("parameters", []) if p["in"] == "query"}

    def envelope(path):
        ref = paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        return components[ref["$ref"].rsplit("/", 1)[1]]

    assert params("/api/workflows/runs/") == {
        "workflow", "status", "owner", "created_after", "created_before", "page", "page_size",
        "paginate", "cursor", "input__contains", "output__contains"}
    for part in ("steps", "history", "timeline"):
        path = f"/api/workflows/runs/{{id}}/{part}/"
        assert params(path) == {"page", "page_size"}
        assert "400" in paths[path]["get"]["responses"]
    for path in ("/api/workflows/runs/", "/api/workflows/runs/{id}/steps/",
                 "/api/workflows/runs/{id}/history/", "/api/workflows/runs/{id}/timeline/"):
        schema = envelope(path)
        assert set(schema["required"]) == {"count", "count_is_estimate", "next", "previous",
                                           "results"}
        assert schema["properties"]["count_is_estimate"]["type"] == "boolean"
    assert envelope("/api/workflows/runs/{id}/steps/")["properties"]["results"]["items"] == {
        "$ref": "#/components/schemas/Step"}


# --- schemathesis ---------------------------------------------------------------------------

#: Every check schemathesis has (max_response_time needs a limit: a generous one), and its
#: coverage, fuzzing and stateful phases (examples: the schema has none).
CONFIG = SchemathesisConfig.from_dict({
    "seed": 22,
    "suppress-health-check": ["all"],
    "checks": {"enabled": True, "max_response_time": 10.0},
    "phases": {
        "examples": {"enabled": False},
        "coverage": {"enabled": True},
        "fuzzing": {"enabled": True, "generation": {"max-examples": 12}},
        "stateful": {"enabled": True, "max-steps": 8},
    },
    "generation": {"deterministic": True},
    "operations": [{
        # A valid approve/ body names a gate, and a valid fork/ body a step, which only
        # the run's records know: a schema-valid name that names none is the 400
        # (UNKNOWN_GATE, FORK_UNKNOWN_STEP) the contract promises.
        "include-operation-id": ["approve_run", "fork_run"],
        "checks": {"positive_data_acceptance": {"expected-statuses": [
            "2xx", "3xx", 400, 401, 403, 404, 409, 429, "5xx"]}},
    }, {
        # start/ and run/: `data` and `start_node` are checked against the workflow the
        # path names (its input_serializer, its entry nodes), which one schema for every
        # workflow cannot describe: a 400 INVALID_INPUT. And run/ answers the run's
        # outcome: 422 when the workflow failed on this input, as the contract says.
        "include-operation-id": ["start_run", "run_workflow"],
        "checks": {"positive_data_acceptance": {"expected-statuses": [
            "2xx", "3xx", 400, 401, 403, 404, 409, 422, 429, "5xx"]}},
    }],
})
schema = schemathesis.openapi.from_dict(api_schema(), config=CONFIG)
# Requests go to the project's WSGI app in-process, the checks' probes too.
schema.app = get_wsgi_application()
ROLES = ("owner", "operator")


@schema.hook
def filter_case(ctx, case):
    """What OpenAPI cannot say about two routes, told to the generator (a ``filter_case``
    hook: the coverage phase applies it too). ``runs/``: a ``cursor`` is one the API gave
    (``next``, ``previous``), and ``page`` goes with page numbers, not with a cursor.
    ``start/``: the idempotency key is in the body or the header; if in both, they agree."""
    query = case.query or {}
    if query.get("cursor") or (query.get("paginate") == "cursor" and "page" in query):
        return False
    header = (case.headers or {}).get("Idempotency-Key")
    body = case.body.get("idempotency_key") if isinstance(case.body, dict) else None
    return header is None or body is None or header == body


@pytest.fixture
def wsgi_app(settings, monkeypatch):
    """The project's WSGI app, without closing the test's database connection after each
    request (as Django's test client does); streams of live runs end within a second."""
    monkeypatch.setattr(stream, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(stream, "LIFETIME_SECONDS", 0.3)
    # run/ of a sleeping workflow waits RUN_TIMEOUT: a short one keeps every answer well
    # inside max_response_time on a loaded machine.
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "RUN_TIMEOUT": "1s"}
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(params=ROLES)
def auth_header(request, users):
    """A token of a run's owner, or of an operator (staff holding every run permission);
    the runs to read, steer and delete are the owner's."""
    runs_in_each_state(owner=users["owner"])
    user = users["owner"] if request.param == "owner" else users["staff"]
    return {"Authorization": f"Token {Token.objects.create(user=user).key}"}


@pytest.mark.django_db
@schema.parametrize()
@hypothesis.settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_conform(case, wsgi_app, auth_header):
    """The coverage and fuzzing phases, every check."""
    case.call_and_validate(headers=auth_header)


@pytest.mark.django_db
def test_stateful_sequences_conform(wsgi_app, auth_header, users):
    """The stateful phase: sequences that follow the schema's links (a started run's id
    to its detail, steps, cancel, delete...), every check on every answer."""

    class APIWorkflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self):
            # Each scenario starts from the same rows: what a link feeds the next request
            # (a run's id, or nothing when a delete came first) must not depend on the
            # scenarios before, or hypothesis sees its data generation drift.
            WorkflowRun.objects.all().delete()
            runs_in_each_state(owner=users["owner"])

        def get_call_kwargs(self, case):
            return {"headers": auth_header}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            # As call_and_validate does: the checks know the credentials were the test's
            # (ignored_auth then probes without them), not generated ones.
            case.validate_response(response, additional_checks=additional_checks,
                                   headers=auth_header, transport_kwargs=kwargs,
                                   recorder=self.recorder)

    APIWorkflow.run(settings=hypothesis.settings(
        max_examples=60, stateful_step_count=8, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
