"""The REST API's views: workflows (list, start, run) and runs (read, stream, steer).

A client of the engine: it reads the models and calls ``pikku_workflows.operations``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.db.models import F, QuerySet, Value
from django.http import StreamingHttpResponse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, Throttled, ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from .. import operations, run_audit
from ..conf import pikku_settings
from ..declarations import Debounce
from ..engine import store
from ..engine.summary import (
    ATTEMPT_RECORD_COLUMNS,
    STEP_RECORD_COLUMNS,
    attempt_record,
    is_graph_run,
    iso,
    public_error,
    run_detail,
    step_names,
    step_record,
)
from ..exceptions import WorkflowRunStateError, WorkflowUnknownGateError
from ..models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import registry
from ..status import RunStatus
from ..step_keys import public_step_name
from . import stream
from .approvals import answerable_gates, describe_gate
from .bodies import read_body_within
from .errors import api_exception_handler
from .filters import RunFilter
from .pagination import RunPagination, RunPartPagination
from .params import StrictQueryParamsMixin
from .parsers import PikkuJSONParser
from .permissions import RunActionPermission, may_read, visible_runs
from .schema import PikkuAutoSchema
from .serializers import (
    PRINTABLE,
    SEND_TEXT_MAX_LENGTH,
    ApprovalAnswerSerializer,
    ApproveBodySerializer,
    AttemptSerializer,
    CancelBodySerializer,
    ErrorSerializer,
    ForkBodySerializer,
    MessageBodySerializer,
    PendingApprovalSerializer,
    ResumeBodySerializer,
    RetryBodySerializer,
    RunBodySerializer,
    RunDetailSerializer,
    RunErrorSerializer,
    RunOutcomeSerializer,
    RunSummarySerializer,
    SentSerializer,
    StartBodySerializer,
    StartedSerializer,
    StepSerializer,
    TimelineEventSerializer,
    WorkflowDetailSerializer,
    WorkflowSerializer,
)

#: What each error status of the API means (the answer is always ``ErrorSerializer``).
_ERROR_DESCRIPTIONS = {
    400: "Invalid body, input or query parameters (field errors in `errors`).",
    401: "Not signed in (with an authentication class that sends a challenge).",
    403: "Not allowed (also: not signed in, with session authentication first).",
    404: "Unknown workflow, run or schedule, or one you may not see.",
    409: "The run or gate is not in a state that allows this, or an idempotency key "
         "was used before with other content.",
    411: "A chunked body on a server that does not decode them: send a Content-Length.",
    413: "The body is over MAX_INPUT_BYTES.",
    415: "The body is not application/json.",
    422: "The run failed.",
    429: "Too many streams open (MAX_STREAMS_PER_USER); see Retry-After.",
}
#: The errors every GET may answer: an unknown query parameter, authentication.
_READ = (400, 401, 403)
#: The errors every POST may answer: its body (invalid, chunked, too large, not JSON).
_WRITE = (400, 401, 403, 411, 413, 415)


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: OpenApiResponse(ErrorSerializer, description=_ERROR_DESCRIPTIONS[code])
            for code in codes}


#: One server-sent event of ``stream/`` (OpenAPI 3.0: a text/event-stream's schema is
#: that of each event).
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["update", "done"],
                  "description": "`update` when the run changed, `done` when it is terminal."},
        "data": {"type": "string",
                 "description": "The run's detail as JSON (as `get_run` answers it)."},
        "retry": {"type": "integer",
                  "description": "Reconnect after this many milliseconds (the stream ends)."},
    },
}

#: The path parameter of the run routes: a run's id (any other text is a 404).
_RUN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH,
                           description="The run's id.")
_WORKFLOW_NAME = OpenApiParameter("name", str, OpenApiParameter.PATH,
                                  description="The workflow's registered name.")


class PikkuAPIMixin:
    """Permissions from ``API_PERMISSION_CLASSES``, errors as ``{detail, code}``, JSON
    bodies only (415 otherwise), and bodies over ``MAX_INPUT_BYTES`` refused (413) before
    they are parsed; chunked bodies read too (``bodies.read_body_within``)."""

    parser_classes: Sequence[type[BaseParser]] = [PikkuJSONParser]

    def get_permissions(self) -> list[Any]:
        return [permission() for permission in pikku_settings.API_PERMISSION_CLASSES]

    def get_exception_handler(self) -> Any:
        return api_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if request.method in ("POST", "PUT", "PATCH"):
            # A declared length over the limit is refused unread; a body without one
            # (chunked) is read here, at most MAX_INPUT_BYTES + 1 bytes of it.
            read_body_within(request._request, pikku_settings.MAX_INPUT_BYTES)


def _idempotency_key(request: Request, in_body: str | None) -> str | None:
    """The key of the body or of the ``Idempotency-Key`` header (400 if they differ, or
    if the caller is anonymous)."""
    header = request.headers.get("Idempotency-Key")
    if header is not None and in_body is not None and header != in_body:
        raise ValidationError({"idempotency_key": [
            "The body's idempotency_key and the Idempotency-Key header differ: give one."]})
    key = in_body if in_body is not None else header
    if key is not None and not request.user.is_authenticated:
        # Anonymous runs have no owner: their keys would share the system scope of the
        # runs your code and schedules start, and replay those runs' ids to strangers.
        raise ValidationError({"idempotency_key": [
            "An idempotency key needs a signed-in caller (keys are scoped per owner)."]})
    return key


#: The ``Idempotency-Key`` header of ``events/`` and ``messages/``.
_SEND_IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", {"type": "string", "minLength": 1, "maxLength": SEND_TEXT_MAX_LENGTH,
                        "pattern": PRINTABLE}, OpenApiParameter.HEADER, required=False,
    description="The same as the body's `idempotency_key` (give one or the other).")


def sent_response(result: Any) -> Response:
    """202 ``{id, woken}`` for a new event or message; 200 with ``Idempotent-Replayed:
    true`` when its idempotency key found an earlier one."""
    body = {"id": result.id, "woken": result.woken}
    if result.created:
        return Response(body, status=status.HTTP_202_ACCEPTED)
    return Response(body, status=status.HTTP_200_OK, headers={"Idempotent-Replayed": "true"})


def _public_keys(items: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """``items`` with the step keys under ``keys`` as the API names steps (gates are
    ``approval:<reason>``, never the engine's ``__workflow_`` keys)."""
    return [{**item, **{key: public_step_name(item[key]) for key in keys
                        if isinstance(item.get(key), str)}} for item in items]


def _run_location(request: Request, run: WorkflowRun) -> str:
    """The run's absolute URL, under the namespace the project mounted the API with."""
    namespace = request.resolver_match.namespace if request.resolver_match else ""
    return reverse(f"{namespace}:run-detail" if namespace else "run-detail",
                   kwargs={"pk": run.pk}, request=request)


def _body(serializer_class: type, request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@extend_schema_view(
    list=extend_schema(
        operation_id="list_workflows", summary="Registered workflows",
        description="Every workflow registered in the project, with the status of its "
                    "current version (`draft`, `active`, `declined`; null before its first "
                    "run). Any signed-in user may list them.",
        responses={200: WorkflowSerializer(many=True), **_errors(*_READ)}),
    retrieve=extend_schema(
        operation_id="get_workflow", summary="A workflow with its step graph and planned steps",
        description="The workflow as listed, plus its step graph (`nodes`, `edges`) and the "
                    "steps its code declares, in order.",
        parameters=[_WORKFLOW_NAME],
        responses={200: WorkflowDetailSerializer, **_errors(*_READ, 404)}),
)
class WorkflowViewSet(StrictQueryParamsMixin, PikkuAPIMixin, viewsets.ViewSet):
    """Registered workflows; ``start/`` and ``run/`` create runs owned by the caller."""

    schema = PikkuAutoSchema()
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def _describe(self, definition: Any, statuses: dict[tuple[str, str], str]) -> dict[str, Any]:
        return {
            "name": definition.name, "source": definition.source,
            "description": definition.description, "tags": list(definition.tags),
            "graph_hash": definition.graph_hash,
            "version_status": statuses.get((definition.name, definition.graph_hash)),
        }

    def _statuses(self, names: list[str]) -> dict[tuple[str, str], str]:
        rows = WorkflowVersion.objects.filter(workflow__in=names).values_list(
            "workflow", "graph_hash", "status")
        return {(workflow, graph_hash): state for workflow, graph_hash, state in rows}

    def list(self, request: Request) -> Response:
        definitions = registry.workflows()
        statuses = self._statuses([d.name for d in definitions])
        return Response([self._describe(d, statuses) for d in definitions])

    def retrieve(self, request: Request, name: str) -> Response:
        definition = registry.workflow(name)
        analysis = definition.analysis
        return Response({
            **self._describe(definition, self._statuses([name])),
            "graph": {"nodes": _public_keys(analysis.graph["nodes"], ("id", "step_name")),
                      "edges": _public_keys(analysis.graph["edges"], ("source", "target"))},
            "planned_steps": _public_keys(analysis.planned_steps, ("step_name",)),
        })

    @extend_schema(
        operation_id="start_run", summary="Start a run (it runs on the configured executor)",
        description="Starts a run owned by the caller and answers 202 with its id and status "
                    "(`Location`: the run's URL). With an idempotency key (in the body or "
                    "the `Idempotency-Key` header), starting again with the same input "
                    "answers 200 with the existing run; with other input, 409 "
                    "`IDEMPOTENCY_CONFLICT`. Keys are scoped per workflow and owner. With "
                    "`start_at` or `delay` the run is `scheduled` until then; with `debounce`, "
                    "starts with one key within its period make one run (the last input); "
                    "`run_timeout` bounds the run's life (`DEADLINE_EXCEEDED`). A workflow "
                    "with a concurrency limit answers `scheduled` (queued for a slot) or "
                    "`cancelled` (`on_full` skip) when its key's slots are held.",
        request=StartBodySerializer,
        parameters=[_WORKFLOW_NAME, OpenApiParameter(
            "Idempotency-Key", {"type": "string", "minLength": 1, "maxLength": 200,
                                "pattern": PRINTABLE}, OpenApiParameter.HEADER, required=False,
            description="The same as the body's `idempotency_key` (give one or the other).")],
        responses={202: OpenApiResponse(StartedSerializer, description="A new run; "
                                        "`Location` is its URL."),
                   200: OpenApiResponse(StartedSerializer, description=(
                       "The run an idempotency key started before (header "
                       "`Idempotent-Replayed: true`).")),
                   **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, name: str) -> Response:
        body = _body(StartBodySerializer, request)
        key = _idempotency_key(request, body["idempotency_key"])
        debounce = body["debounce"]
        with operations.started_from({"type": "http"}):
            started = operations.start_or_replay(
                name, body["data"], owner=request.user, idempotency_key=key,
                start_node=body["start_node"], start_at=body["start_at"],
                delay=body["delay"], run_timeout=body["run_timeout"],
                debounce=None if debounce is None else Debounce(
                    debounce["key"], period=debounce["period"],
                    max_wait=debounce["max_wait"]))
        run = started.run
        headers = {"Location": _run_location(request, run)}
        if started.replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response({"id": str(run.pk), "status": run.status}, headers=headers,
                        status=status.HTTP_200_OK if started.replayed
                        else status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="run_workflow",
                   summary="Run inline to completion and answer with the output",
                   description="Runs the workflow in the request and answers 200 with its "
                               "output; 422 if the run failed, 409 if it was cancelled or "
                               "suspended. Waits at most `timeout` (default and most: the "
                               "RUN_TIMEOUT setting); past it, 202 with the run's id and "
                               "`Location`, and the run goes on without the request (the "
                               "recovery sweep takes it up).",
                   request=RunBodySerializer, parameters=[_WORKFLOW_NAME],
                   responses={200: RunOutcomeSerializer,
                              202: OpenApiResponse(StartedSerializer, description=(
                                  "Still running at the timeout; `Location` is its URL.")),
                              **_errors(*_WRITE, 404),
                              409: OpenApiResponse(RunErrorSerializer, description=(
                                  "The run was cancelled or suspended, or the workflow's "
                                  "version is declined.")),
                              422: OpenApiResponse(RunErrorSerializer,
                                                   description="The run failed.")})
    @action(detail=True, methods=["post"])
    def run(self, request: Request, name: str) -> Response:
        body = _body(RunBodySerializer, request)
        timeout = body["timeout"] or pikku_settings.RUN_TIMEOUT
        with operations.started_from({"type": "http"}):
            run = operations.run_until_settled(name, body["data"], owner=request.user,
                                               timeout=timeout, return_at_deadline=True)
        if run.status == RunStatus.RUNNING:
            # Still waiting at the timeout: the run goes on without this request.
            return Response({"id": str(run.pk), "status": run.status},
                            status=status.HTTP_202_ACCEPTED,
                            headers={"Location": _run_location(request, run)})
        if run.status == RunStatus.COMPLETED:
            return Response({"id": str(run.pk), "status": run.status, "output": run.output})
        error = public_error(run.error) or {}
        code = status.HTTP_422_UNPROCESSABLE_ENTITY if run.status == RunStatus.FAILED \
            else status.HTTP_409_CONFLICT
        return Response({
            "detail": error.get("message") or f"the run is {run.status}",
            "code": error.get("code") or run.status.upper(),
            "id": str(run.pk), "status": run.status, "error": error or None,
        }, status=code)


def _run_response(run: WorkflowRun) -> Response:
    return Response(run_detail(run))


@extend_schema_view(
    list=extend_schema(
        operation_id="list_runs", summary="Runs, newest first (yours; with view_workflowrun: all)",
        description="The runs you own, or every run with the `view_workflowrun` permission, "
                    "newest first, paginated by page number or (`paginate=cursor`) by a "
                    "cursor. A page past the end is a 404.",
        responses={200: RunSummarySerializer(many=True), **_errors(*_READ, 404)}),
    retrieve=extend_schema(
        operation_id="get_run", summary="A run with its steps",
        description="The run's detail: status, input, output (null unless completed), "
                    "error and a summary of each step. Answers an `ETag`; send it back in "
                    "`If-None-Match` to get 304 while nothing changed.",
        parameters=[_RUN_ID, OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER,
                                              required=False)],
        responses={200: RunDetailSerializer,
                   304: OpenApiResponse(description="Not modified since that ETag."),
                   **_errors(*_READ, 404)}),
    destroy=extend_schema(
        operation_id="delete_run", summary="Delete a finished run with its steps and attempts",
        description="Deletes a finished (completed, failed or cancelled) run with its steps "
                    "and attempts; 409 while it is running or suspended.",
        parameters=[_RUN_ID],
        responses={204: OpenApiResponse(description="Deleted."),
                   **_errors(401, 403, 404, 409)}),
)
class RunViewSet(StrictQueryParamsMixin, PikkuAPIMixin, mixins.ListModelMixin,
                 mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                 viewsets.GenericViewSet[WorkflowRun]):
    """Runs: a user sees the runs they own, holders of ``view_workflowrun`` all; any other
    run is a 404 (``api/permissions.py`` has the rules)."""

    schema = PikkuAutoSchema()
    serializer_class = RunSummarySerializer
    pagination_class = RunPagination
    filter_backends = [DjangoFilterBackend]
    filterset_class = RunFilter
    lookup_value_regex = "[^/]+"
    #: What each GET route takes in its query string; any other parameter is a 400.
    query_parameters = {
        "list": (*RunFilter.base_filters, *RunPagination.query_parameters),
        **dict.fromkeys(("steps", "history", "timeline"), RunPartPagination.query_parameters),
    }

    def get_queryset(self) -> QuerySet[WorkflowRun]:
        return visible_runs(self.request.user, self.action)

    def get_permissions(self) -> list[Any]:
        return [*super().get_permissions(), RunActionPermission()]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        if self.action == "stream":
            # EventSource asks for text/event-stream: the stream is that, and the errors
            # before it (401, 403, 404) are JSON like every other error of the API.
            return JSONRenderer(), JSONRenderer.media_type
        return super().perform_content_negotiation(request, force)

    def get_object(self) -> WorkflowRun:
        try:
            run_id = uuid.UUID(str(self.kwargs["pk"]))
        except ValueError:
            raise NotFound(f"No run has the id {self.kwargs['pk']!r}.") from None
        run = self.get_queryset().filter(pk=run_id).first()
        if run is None:
            raise NotFound(f"No run has the id {run_id}.")
        self.check_object_permissions(self.request, run)
        return run

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        detail = run_detail(self.get_object())
        # A weak validator of the detail itself: a poller whose copy is current gets 304.
        digest = hashlib.sha256(json.dumps(detail, sort_keys=True, default=str).encode())
        etag = f'W/"{digest.hexdigest()[:32]}"'
        headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
        wanted = request.headers.get("If-None-Match", "")
        if etag in (tag.strip() for tag in wanted.split(",")) or wanted.strip() == "*":
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=headers)
        return Response(detail, headers=headers)

    def perform_destroy(self, instance: WorkflowRun) -> None:
        if not instance.is_terminal:
            raise WorkflowRunStateError(
                f"run {instance.pk} is {instance.status}: cancel it before deleting it")
        store.delete_runs([instance.pk])
        run_audit.record(self.request.user, instance.pk, "delete", via="API")

    def _page(self, rows: QuerySet[Any, Any]) -> list[Any]:
        """The requested page of ``rows`` (a run's steps, attempts or events)."""
        assert self.paginator is not None  # steps, history and timeline set theirs
        return self.paginator.paginate_queryset(rows, self.request, view=self) or []

    @extend_schema(operation_id="list_run_steps",
                   summary="The run's steps, in the order they were recorded (paginated)",
                   description="Each step of the run with its data, result, error and "
                               "number of attempts, in the order they were recorded.",
                   parameters=[_RUN_ID],
                   responses={200: StepSerializer(many=True), **_errors(*_READ, 404)})
    @action(detail=True, methods=["get"], pagination_class=RunPartPagination,
            filter_backends=[])
    def steps(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        rows = self._page(
            WorkflowStep.objects.filter(run=run).order_by("id").values(*STEP_RECORD_COLUMNS))
        graph = is_graph_run(run.workflow, run.graph_hash)
        return self.get_paginated_response([step_record(row, graph=graph) for row in rows])

    @extend_schema(operation_id="get_run_history",
                   summary="One entry per attempt, oldest first (paginated)",
                   description="Every attempt of every step of the run, oldest first, "
                               "with its status, result, error and timestamps.",
                   parameters=[_RUN_ID],
                   responses={200: AttemptSerializer(many=True), **_errors(*_READ, 404)})
    @action(detail=True, methods=["get"], pagination_class=RunPartPagination,
            filter_backends=[])
    def history(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        rows = self._page(StepAttempt.objects.filter(step__run=run).order_by(
            "created_at", "id").values(*ATTEMPT_RECORD_COLUMNS))
        graph = is_graph_run(run.workflow, run.graph_hash)
        # Plain rows, not model instances: those cost 10x at 20,000 attempts.
        return self.get_paginated_response([attempt_record(row, graph=graph) for row in rows])

    @extend_schema(operation_id="get_run_timeline",
                   summary="Events folded from the attempts, in time order (paginated)",
                   description="Each attempt's `created`, `scheduled`, `running`, "
                               "`succeeded` and `failed` moments, in time order (ties: by "
                               "attempt, then in that order); `error` on `failed` events.",
                   parameters=[_RUN_ID],
                   responses={200: TimelineEventSerializer(many=True),
                              **_errors(*_READ, 404)})
    @action(detail=True, methods=["get"], pagination_class=RunPartPagination,
            filter_backends=[])
    def timeline(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        rows = self._page(timeline_queryset(run))
        graph = is_graph_run(run.workflow, run.graph_hash)
        return self.get_paginated_response([timeline_event(row, graph=graph) for row in rows])

    @extend_schema(operation_id="stream_run",
                   summary="Server-sent events: `update` on change, `done` when terminal",
                   description="A `text/event-stream` for `EventSource`: an `update` event "
                               "with the run's detail whenever it changes, `done` when it is "
                               "terminal. A stream lasts at most 30 seconds under WSGI, then "
                               "asks the client to reconnect. At most MAX_STREAMS_PER_USER "
                               "streams per user (429 beyond, before any event).",
                   parameters=[_RUN_ID],
                   responses={(200, "text/event-stream"): OpenApiResponse(
                       _SSE_EVENT, description="The events; each described by the schema."),
                              **_errors(*_READ, 404, 429)})
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer])
    def stream(self, request: Request, pk: str) -> StreamingHttpResponse:
        run = self.get_object()
        cap = pikku_settings.MAX_STREAMS_PER_USER
        user_key = str(request.user.pk) if request.user.is_authenticated else "anonymous"
        release = stream.take_slot(user_key, cap)
        if release is None:
            raise Throttled(
                wait=stream.RETRY_AFTER_SECONDS, code="TOO_MANY_STREAMS",
                detail=f"You have {cap} streams open (MAX_STREAMS_PER_USER): close one.")
        events: Any
        if isinstance(request._request, ASGIRequest):
            events = stream.async_events(run.pk)
        else:
            events = stream.sync_events(run.pk)
        response = stream.SlotStreamingResponse(events, release,
                                                content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass events on as they come
        return response

    @extend_schema(operation_id="resume_run", summary="Resume a suspended run",
                   description="Resumes a run paused by `wf.suspend()`, which returns "
                               "`data`; answers the run's detail. 409 if it is not "
                               "suspended, and 409 `WAITING_FOR_APPROVAL` if it waits at "
                               "an approval gate (answer it with `approve/`).",
                   request=ResumeBodySerializer, parameters=[_RUN_ID],
                   responses={200: RunDetailSerializer, **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(ResumeBodySerializer, request)
        resumed = operations.resume_run(run.pk, body["data"])
        run_audit.record(request.user, run.pk, "resume", via="API",
                         reason=run_audit.as_reason(body["data"]))
        return _run_response(resumed)

    @extend_schema(operation_id="cancel_run", summary="Cancel a running or suspended run",
                   description="Cancels a live run (its compensations run); answers the "
                               "run's detail. 409 if it is finished already.",
                   request=CancelBodySerializer, parameters=[_RUN_ID],
                   responses={200: RunDetailSerializer, **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(CancelBodySerializer, request)
        cancelled = operations.cancel_run(run.pk, body["reason"])
        run_audit.record(request.user, run.pk, "cancel", via="API",
                         reason=body["reason"] or "")
        return _run_response(cancelled)

    @extend_schema(operation_id="retry_run", summary="Retry a failed run from its failed steps",
                   description="Runs a failed run again from its failed steps (those that "
                               "succeeded keep their results); takes an empty object. "
                               "Answers the run's detail; 409 if it has not failed.",
                   # An empty object: drf-spectacular leaves out a serializer without fields.
                   request={"application/json": {"type": "object", "properties": {},
                                                 "additionalProperties": False}},
                   parameters=[_RUN_ID],
                   responses={200: RunDetailSerializer, **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        _body(RetryBodySerializer, request)
        retried = operations.retry_run(run.pk)
        run_audit.record(request.user, run.pk, "retry", via="API")
        return _run_response(retried)

    @extend_schema(operation_id="fork_run",
                   summary="Rerun a finished run from a step, as a new run (a fork)",
                   description=(
                       "Creates and starts a new run of the current code that keeps the "
                       "steps this run recorded before `from_step` (their results and "
                       "child runs) and runs `from_step` and everything after it again; "
                       "the run itself is not changed. Answers the fork's id and status. "
                       "409 `FORK_NOT_TERMINAL` if the run is live (other than suspended with "
                       "`VERSION_CONFLICT`), 409 `FORK_DIVERGES` if "
                       "the current code does not replay the kept steps (nothing is "
                       "written), 400 `FORK_UNKNOWN_STEP` if `from_step` names no step of "
                       "the run. `Location` is the fork's URL. The owner, or a holder of "
                       "`fork_workflowrun`."),
                   request=ForkBodySerializer, parameters=[_RUN_ID],
                   responses={202: OpenApiResponse(StartedSerializer,
                                                   description="The fork (a new run)."),
                              **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(ForkBodySerializer, request)
        with operations.started_from({"type": "http"}):
            fork = operations.fork_run(run.pk, from_step=body["from_step"],
                                       input=body["input"], reason=body["reason"],
                                       user=request.user)
        run_audit.record(request.user, run.pk, "rerun", via="API",
                         reason=run_audit.fork_reason(fork))
        return Response({"id": str(fork.pk), "status": fork.status},
                        status=status.HTTP_202_ACCEPTED,
                        headers={"Location": _run_location(request, fork)})

    @extend_schema(operation_id="send_message", summary="Send a message to a run",
                   description=(
                       "Queues a message for the run's `recv` on `topic` (default "
                       "`default`; first in, first out) and wakes the run if it waits "
                       "for one; a run that reaches its `recv` later receives it then. "
                       "Answers 202 with the message's id and how many runs it woke (0 "
                       "or 1). 409 if the run is finished. With an idempotency key (body "
                       "or `Idempotency-Key` header) sending again with the same content "
                       "to this run answers 200 with the first message's id; with other "
                       "content, 409 `IDEMPOTENCY_CONFLICT`. The owner, or a holder of "
                       "`resume_workflowrun`."),
                   request=MessageBodySerializer,
                   parameters=[_RUN_ID, _SEND_IDEMPOTENCY_HEADER],
                   responses={202: OpenApiResponse(SentSerializer,
                                                   description="The message was queued."),
                              200: OpenApiResponse(SentSerializer, description=(
                                  "The message an idempotency key sent before (header "
                                  "`Idempotent-Replayed: true`).")),
                              **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def messages(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(MessageBodySerializer, request)
        key = _idempotency_key(request, body["idempotency_key"])
        result = operations.send(run.pk, body["data"], topic=body["topic"],
                                 idempotency_key=key, sent_by=request.user)
        # As the console words it: which message, and its data.
        parts = [f"message {result.id}" + ("" if result.created else " (sent before)"),
                 run_audit.as_reason(body["data"])]
        run_audit.record(request.user, run.pk, "send_message", via="API", gate=body["topic"],
                         reason=", ".join(part for part in parts if part))
        return sent_response(result)

    @extend_schema(operation_id="get_run_state", summary="The run's state keys",
                   description="Every state key the run has set (what it published: "
                               "graph nodes' `ctx.set_state`), as one JSON object.",
                   parameters=[_RUN_ID],
                   responses={200: OpenApiResponse(
                       {"type": "object", "additionalProperties": True},
                       description="The state keys and their values."),
                              **_errors(*_READ, 404)})
    @action(detail=True, methods=["get"], filter_backends=[])
    def state(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        return Response(operations.get_run_state(run.pk))

    @extend_schema(operation_id="approve_run",
                   summary="Answer an approval gate (its policy decides who may)",
                   description=(
                       "Answers what became of the decision, never the run's data: "
                       "`decided` (the gate took it), `rejected` (its policy or serializer "
                       "refused it; `errors` says why) or `recorded` (it waits for the run "
                       "to reach the gate). The owner or a holder of "
                       "`approve_workflowrun` may answer; then the gate's own policy."),
                   request=ApproveBodySerializer, parameters=[_RUN_ID],
                   responses={200: ApprovalAnswerSerializer, **_errors(*_WRITE, 404, 409)})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(ApproveBodySerializer, request)
        try:
            answer = operations.answer_approval(run.pk, body["reason"], body["decision"],
                                                user=request.user)
        except WorkflowUnknownGateError as exc:
            data: dict[str, Any] = {"detail": f"This run has no approval gate "
                                              f"{body['reason']!r}.", "code": exc.code}
            if may_read(request.user, run):
                # Only those who may read the run learn which gates it has.
                data["gates"] = exc.gates
                data["detail"] += (" Its gates: " + ", ".join(map(repr, exc.gates))
                                   if exc.gates else " It has none.")
            return Response(data, status=exc.http_status)
        if answer.status != "rejected":  # refused by the gate: the run's state is unchanged
            decision = body["decision"]
            rejected = isinstance(decision, dict) and decision.get("approved") is False
            run_audit.record(request.user, run.pk, "reject" if rejected else "approve",
                             via="API", gate=body["reason"],
                             reason=run_audit.as_reason(decision))
        return Response(answer.as_dict())


@extend_schema_view(
    list=extend_schema(
        operation_id="list_approvals", summary="Open approval gates you may answer",
        description=("Gates waiting for a decision on runs you may approve (your own, or "
                     "every run with `approve_workflowrun`) whose policy admits you, newest "
                     "first; answer one with `POST runs/{run}/approve/`."),
        responses={200: PendingApprovalSerializer(many=True), **_errors(*_READ, 404)}),
)
class ApprovalViewSet(StrictQueryParamsMixin, PikkuAPIMixin, mixins.ListModelMixin,
                      viewsets.GenericViewSet[WorkflowStep]):
    """The approvals inbox."""

    schema = PikkuAutoSchema()
    pagination_class = RunPartPagination
    query_parameters = {"list": RunPartPagination.query_parameters}

    def get_queryset(self) -> QuerySet[WorkflowStep]:
        return answerable_gates(self.request.user)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([describe_gate(gate) for gate in page or ()])


def _step_fields(key: str, rpc_name: str | None, child_run: Any, duration: Any,
                 wait: Any, graph: bool) -> dict[str, str]:
    """``{step, label, kind}`` of an attempt's or an event's step (history, timeline)."""
    names = step_names(key, rpc_name=rpc_name, child_run=child_run,
                       data={"duration": duration, "wait": wait}, graph=graph)
    return {"step": names["name"], "label": names["label"], "kind": names["kind"]}


_EVENTS = ("created", "scheduled", "running", "succeeded", "failed")


def timeline_queryset(run: WorkflowRun) -> QuerySet[Any]:
    """The run's timeline events as rows, in time order (ties: attempt, then lifecycle):
    one ``UNION ALL`` branch per attempt timestamp, so that the database sorts and pages
    them (a page reads one page of events, not every attempt of the run)."""
    attempts = StepAttempt.objects.filter(step__run=run).order_by()  # no Meta ordering
    branches = [
        attempts.filter(**{f"{name}_at__isnull": False}).annotate(
            at=F(f"{name}_at"), event_order=Value(order), event=Value(name),
            step_name=F("step__step_name"), rpc_name=F("step__rpc_name"),
            child_run=F("step__child_run_id"), duration=F("step__data__duration"),
            wait=F("step__data__wait"),
        ).values("at", "id", "event_order", "event", "step_name", "rpc_name", "child_run",
                 "duration", "wait", "attempt", "error")
        for order, name in enumerate(_EVENTS)
    ]
    return branches[0].union(*branches[1:], all=True).order_by("at", "id", "event_order")


def timeline_event(row: dict[str, Any], *, graph: bool = False) -> dict[str, Any]:
    """A row of :func:`timeline_queryset` as the API shows it (``graph``: the run is a
    graph run)."""
    event = {"at": iso(row["at"]),
             **_step_fields(row["step_name"], row["rpc_name"], row["child_run"],
                            row["duration"], row["wait"], graph),
             "attempt": row["attempt"], "event": row["event"]}
    if row["event"] == "failed":
        event["error"] = public_error(row["error"])
    return event

__all__ = ["ApprovalViewSet", "RunViewSet", "WorkflowViewSet"]
