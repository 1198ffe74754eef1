"""The API's OpenAPI schema, as drf-spectacular generates it in any project, without
``SPECTACULAR_SETTINGS``:

- each choice set is one named enum component (``PikkuRunStatus``, ``PikkuStepStatus``...),
  so that the schema generates without warnings and without ``ENUM_NAME_OVERRIDES``;
- request bodies say ``additionalProperties: false``: the API refuses unknown keys (400);
- query parameters say ``allowEmptyValue``: the API takes an empty one for one left out;
- responses carry OpenAPI links (``start_run``'s ``id`` to ``get_run``...), which
  clients and schemathesis's stateful tests follow from one operation to the next.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent

from ..conf import pikku_settings
from ..durations import MAX_DURATION_SECONDS
from .filters import CONTENT_PARAMETER_SCHEMA


class NamedEnumExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """A ``NamedChoiceField`` as a reference to its own enum component (never an inline
    enum, which drf-spectacular names after the field and warns when names collide)."""

    target_class = "pikku_workflows.api.serializers.NamedChoiceField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        field = self.target
        component = ResolvedComponent(  # type: ignore[no-untyped-call]
            name=field.enum_name, type=ResolvedComponent.SCHEMA, object=field.enum_name,
            schema={"type": "string", "enum": [str(choice) for choice in field.choices]})
        auto_schema.registry.register_on_missing(component)
        return component.ref


class RunTimeoutExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """``run/``'s ``timeout`` in seconds: more than 0, at most the ``RUN_TIMEOUT`` setting
    (read when the schema is generated). The API takes strings (``"10s"``) too, which the
    schema leaves out: their bound cannot be written as a pattern."""

    target_class = "pikku_workflows.api.serializers.RunTimeoutField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        return {"type": "number", "exclusiveMinimum": True, "minimum": 0,
                "maximum": pikku_settings.RUN_TIMEOUT, "example": 10}


class DelayExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """``start/``'s ``delay``: seconds (0 or more) or a duration's text (``"10min"``). The
    pattern names the common forms only (the API takes every unit of the durations)."""

    target_class = "pikku_workflows.api.serializers.DelayField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        return {"oneOf": [{"type": "number", "minimum": 0,
                           "maximum": MAX_DURATION_SECONDS},
                          {"type": "string", "pattern": "^[0-9]{1,4}(ms|s|min|h|d)$"}],
                "nullable": True, "example": "10min"}


class PositiveDurationExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """``run_timeout`` and a debounce's ``period``/``max_wait``: seconds (more than 0) or
    a duration's text (``"30min"``)."""

    target_class = "pikku_workflows.api.serializers.PositiveDurationField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        return {"oneOf": [{"type": "number", "exclusiveMinimum": True, "minimum": 0,
                           "maximum": MAX_DURATION_SECONDS},
                          {"type": "string", "pattern": "^[1-9][0-9]{0,3}(ms|s|min|h|d)$"}],
                "nullable": True, "example": "30min"}


class StrictBodyExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """A request body refuses keys it does not name (400): ``additionalProperties: false``,
    so that a client (or a generator of valid bodies) never sends one."""

    target_class = "pikku_workflows.api.serializers.StrictBodySerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        return schema


class TimelineEventExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """A timeline event's ``at`` is a timestamp (``format: date-time``), as every other
    timestamp of the API; its serializer (a description of rows built by the view) keeps
    it a plain string field."""

    target_class = "pikku_workflows.api.serializers.TimelineEventSerializer"

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["properties"]["at"].update(type="string", format="date-time")
        return schema


def _run_links(run_id: str) -> dict[str, dict[str, Any]]:
    """Links from an answer that names a run (``run_id``: a runtime expression) to the
    routes of that run. The stream is left out: it stays open while the run is live."""
    described = {
        "get_run": "The run's detail.", "list_run_steps": "The run's steps.",
        "get_run_history": "The run's attempts.", "get_run_timeline": "The run's events.",
        "resume_run": "Resume it, once it is suspended.",
        "cancel_run": "Cancel it while it is live.", "retry_run": "Retry it once it failed.",
        "delete_run": "Delete it once it is finished.",
        "fork_run": "Rerun it from a step once it is finished.",
        "get_run_state": "The state keys it set.",
        "send_message": "Send it a message while it is live.",
    }
    return {operation: {"operationId": operation, "parameters": {"id": run_id},
                        "description": description}
            for operation, description in described.items()}


#: The links of each operation's answers, by operation id and status.
LINKS: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "list_workflows": {"200": {
        "get_workflow": {"operationId": "get_workflow",
                         "parameters": {"name": "$response.body#/0/name"},
                         "description": "The first workflow listed."},
        "start_run": {"operationId": "start_run",
                      "parameters": {"name": "$response.body#/0/name"},
                      "description": "Start a run of the first workflow listed."},
    }},
    "get_workflow": {"200": {
        "start_run": {"operationId": "start_run", "parameters": {"name": "$request.path.name"},
                      "description": "Start a run of this workflow."},
        "run_workflow": {"operationId": "run_workflow",
                         "parameters": {"name": "$request.path.name"},
                         "description": "Run this workflow inline."},
    }},
    "start_run": {"202": _run_links("$response.body#/id"),
                  "200": _run_links("$response.body#/id")},
    "run_workflow": {"200": _run_links("$response.body#/id"),
                     "202": _run_links("$response.body#/id")},
    "list_runs": {"200": _run_links("$response.body#/results/0/id")},
    "get_run": {"200": _run_links("$request.path.id")},
    "resume_run": {"200": _run_links("$request.path.id")},
    "cancel_run": {"200": _run_links("$request.path.id")},
    "retry_run": {"200": _run_links("$request.path.id")},
    "fork_run": {"202": _run_links("$response.body#/id")},
    "list_approvals": {"200": {
        "approve_run": {"operationId": "approve_run",
                        "parameters": {"id": "$response.body#/results/0/run"},
                        "requestBody": {"reason": "$response.body#/results/0/reason",
                                        "decision": True},
                        "description": "Approve the newest open gate."},
        "get_run": {"operationId": "get_run",
                    "parameters": {"id": "$response.body#/results/0/run"},
                    "description": "The run of the newest open gate."},
    }},
}


#: The query parameters that carry a JSON object (``filters.ContentFilter``).
CONTENT_PARAMETERS = ("input__contains", "output__contains")


class PikkuAutoSchema(AutoSchema):
    """drf-spectacular's ``AutoSchema`` with the API's OpenAPI links (``LINKS``) on its
    answers, and ``allowEmptyValue`` on its query parameters (an empty one is left out).
    The views set it as their ``schema``, so that it applies whatever the project's
    ``DEFAULT_SCHEMA_CLASS``."""

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "query":
                # The API takes ``?page=`` (any empty value) for the parameter left out.
                parameter["allowEmptyValue"] = True
                if parameter.get("name") in CONTENT_PARAMETERS:
                    # A JSON object in the query string: OpenAPI's ``content`` form (an
                    # empty value is still taken for none; it is not a JSON object).
                    del parameter["schema"], parameter["allowEmptyValue"]
                    parameter["content"] = {
                        "application/json": {"schema": CONTENT_PARAMETER_SCHEMA,
                                             "example": {"order_id": 8}}}
        for code, links in LINKS.get(operation.get("operationId", ""), {}).items():
            response = operation.get("responses", {}).get(code)
            if response is not None:
                response["links"] = links
        return operation
