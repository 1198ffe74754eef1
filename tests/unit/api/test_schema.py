"""The OpenAPI schema covers every route, and a schemathesis run finds no 5xx and no
response that breaks it (a few hundred generated cases, a fixed seed)."""

from __future__ import annotations

import base64

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

import pikku_workflows as pw

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
}


def api_schema() -> dict:
    generated = SchemaGenerator().get_schema(request=None, public=True)
    # The API only: the schema view documents itself too.
    generated["paths"] = {path: spec for path, spec in generated["paths"].items()
                          if path.startswith("/api/workflows/")}
    return generated


def test_every_route_is_in_the_schema_with_its_error_codes():
    paths = api_schema()["paths"]
    found = {(method, path) for path, spec in paths.items() for method in spec}
    assert found == OPERATIONS
    start = paths["/api/workflows/workflows/{name}/start/"]["post"]
    assert {"202", "400", "404", "409", "413"} <= set(start["responses"])
    assert "422" in paths["/api/workflows/workflows/{name}/run/"]["post"]["responses"]
    assert "requestBody" in paths["/api/workflows/runs/{id}/approve/"]["post"]
    # Every GET refuses unknown query parameters: a 400 on each.
    assert all("400" in spec["get"]["responses"] for spec in paths.values() if "get" in spec)


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
        "paginate", "cursor"}
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


schema = schemathesis.openapi.from_dict(api_schema())
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.fixture
def wsgi_app(settings):
    """The project's WSGI app, without closing the test's database connection after each
    request (as Django's test client does)."""
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def auth_header(django_user_model):
    django_user_model.objects.create_superuser("fuzz", "fuzz@example.com", "fuzz")
    pw.start_workflow("two_gates", {})  # something to read, steer and delete
    pw.start_workflow("retrying", {"fail_times": 5, "retries": 0})
    return {"Authorization": "Basic " + base64.b64encode(b"fuzz:fuzz").decode()}


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=20, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_generated_requests_get_no_5xx_and_conform(case, auth_header, wsgi_app):
    response = case.call(app=wsgi_app, headers=auth_header)
    case.validate_response(response, checks=CHECKS)
