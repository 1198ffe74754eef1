"""The REST API's views: workflows (list, start, run) and runs (read, stream, steer).

A client of the engine: it reads the models and calls ``pikku_workflows.operations``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.db.models import F, QuerySet, Value
from django.http import StreamingHttpResponse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from .. import operations
from ..conf import pikku_settings
from ..engine import store
from ..engine.summary import iso, public_error, run_detail
from ..exceptions import WorkflowRunStateError
from ..models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import registry
from ..status import RunStatus
from . import stream
from .errors import PayloadTooLarge, api_exception_handler
from .filters import RunFilter
from .pagination import RunPagination, RunPartPagination
from .params import StrictQueryParamsMixin
from .parsers import PikkuJSONParser
from .serializers import (
    ApproveBodySerializer,
    AttemptSerializer,
    CancelBodySerializer,
    ErrorSerializer,
    ResumeBodySerializer,
    RetryBodySerializer,
    RunBodySerializer,
    RunDetailSerializer,
    RunErrorSerializer,
    RunOutcomeSerializer,
    RunSummarySerializer,
    StartBodySerializer,
    StartedSerializer,
    StepSerializer,
    TimelineEventSerializer,
    WorkflowDetailSerializer,
    WorkflowSerializer,
)


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    described = {400: "Invalid body, input or query parameters (field errors in `errors`)",
                 401: "Not signed in",
                 403: "Refused", 404: "Unknown workflow or run (or not yours)",
                 409: "Wrong state", 413: "Body over MAX_INPUT_BYTES",
                 422: "The run failed"}
    return {code: OpenApiResponse(ErrorSerializer, description=described[code])
            for code in codes}


class PikkuAPIMixin:
    """Permissions from ``API_PERMISSION_CLASSES``, errors as ``{detail, code}``, JSON
    bodies only (415 otherwise), and bodies over ``MAX_INPUT_BYTES`` refused (413) before
    they are parsed."""

    parser_classes: Sequence[type[BaseParser]] = [PikkuJSONParser]

    def get_permissions(self) -> list[Any]:
        return [permission() for permission in pikku_settings.API_PERMISSION_CLASSES]

    def get_exception_handler(self) -> Any:
        return api_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if request.method in ("POST", "PUT", "PATCH"):
            limit = pikku_settings.MAX_INPUT_BYTES
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                declared = 0
            # The declared length first: an oversized body is never read. A body sent
            # without one is read (Django bounds it) and measured.
            if declared > limit or len(request._request.body) > limit:
                raise PayloadTooLarge(
                    f"The request body is over MAX_INPUT_BYTES ({limit} bytes).")


def _body(serializer_class: type, request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@extend_schema_view(
    list=extend_schema(summary="Registered workflows",
                       responses={200: WorkflowSerializer(many=True), **_errors(400, 401, 403)}),
    retrieve=extend_schema(summary="A workflow with its step graph and planned steps",
                           responses={200: WorkflowDetailSerializer,
                                      **_errors(400, 401, 403, 404)}),
)
class WorkflowViewSet(StrictQueryParamsMixin, PikkuAPIMixin, viewsets.ViewSet):
    """Registered workflows; ``start/`` and ``run/`` create runs owned by the caller."""

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
            "graph": {"nodes": analysis.graph["nodes"], "edges": analysis.graph["edges"]},
            "planned_steps": analysis.planned_steps,
        })

    @extend_schema(summary="Start a run (it runs on the configured executor)",
                   request=StartBodySerializer,
                   responses={202: StartedSerializer, **_errors(400, 401, 403, 404, 409, 413)})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, name: str) -> Response:
        body = _body(StartBodySerializer, request)
        with operations.started_from({"type": "http"}):
            run = operations.start_workflow(name, body["data"], owner=request.user,
                                            idempotency_key=body["idempotency_key"])
        return Response({"id": str(run.pk), "status": run.status},
                        status=status.HTTP_202_ACCEPTED)

    @extend_schema(summary="Run inline to completion and answer with the output",
                   request=RunBodySerializer,
                   responses={200: RunOutcomeSerializer, 422: RunErrorSerializer,
                              409: RunErrorSerializer, **_errors(400, 401, 403, 404, 413)})
    @action(detail=True, methods=["post"])
    def run(self, request: Request, name: str) -> Response:
        body = _body(RunBodySerializer, request)
        with operations.started_from({"type": "http"}):
            run = operations.run_until_settled(name, body["data"], owner=request.user)
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
    list=extend_schema(summary="Runs, newest first (yours; staff: all)",
                       responses={200: RunSummarySerializer(many=True),
                                  **_errors(400, 401, 403, 404)}),
    retrieve=extend_schema(summary="A run with its steps",
                           responses={200: RunDetailSerializer, **_errors(400, 401, 403, 404)}),
    destroy=extend_schema(summary="Delete a finished run with its steps and attempts",
                          responses={204: None, **_errors(401, 403, 404, 409)}),
)
class RunViewSet(StrictQueryParamsMixin, PikkuAPIMixin, mixins.ListModelMixin,
                 mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                 viewsets.GenericViewSet[WorkflowRun]):
    """Runs: a user sees the runs they own, staff see all; any other run is a 404."""

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
        runs = WorkflowRun.objects.order_by("-created_at")
        user = self.request.user
        if user.is_staff or (self.action == "approve" and user.has_perm(
                "pikku_workflows.approve_workflowrun")):
            # Approvers answer gates of others' runs; the gate's policy still decides.
            return runs
        if not user.is_authenticated:
            return runs.none()  # ownerless runs are nobody's to read
        return runs.filter(owner_id=user.pk)

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
        return _run_response(self.get_object())

    def perform_destroy(self, instance: WorkflowRun) -> None:
        if not instance.is_terminal:
            raise WorkflowRunStateError(
                f"run {instance.pk} is {instance.status}: cancel it before deleting it")
        store.delete_runs([instance.pk])

    def _page(self, rows: QuerySet[Any, Any]) -> list[Any]:
        """The requested page of ``rows`` (a run's steps, attempts or events)."""
        assert self.paginator is not None  # steps, history and timeline set theirs
        return self.paginator.paginate_queryset(rows, self.request, view=self) or []

    @extend_schema(summary="The run's steps, in the order they were recorded (paginated)",
                   responses={200: StepSerializer(many=True), **_errors(400, 401, 403, 404)})
    @action(detail=True, methods=["get"], pagination_class=RunPartPagination,
            filter_backends=[])
    def steps(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        rows = self._page(
            WorkflowStep.objects.filter(run=run).order_by("id").values(*_STEP_COLUMNS))
        return self.get_paginated_response([step_row(row) for row in rows])

    @extend_schema(summary="One entry per attempt, oldest first (paginated)",
                   responses={200: AttemptSerializer(many=True), **_errors(400, 401, 403, 404)})
    @action(detail=True, methods=["get"], pagination_class=RunPartPagination,
            filter_backends=[])
    def history(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        rows = self._page(
            StepAttempt.objects.filter(step__run=run).order_by("created_at", "id").values(
                "step__step_name", "attempt", "status", "result", "error", "created_at",
                "running_at", "succeeded_at", "failed_at"))
        # Plain rows, the AttemptSerializer's fields: model instances cost 10x at 20,000.
        return self.get_paginated_response([{
            "step": row["step__step_name"], "attempt": row["attempt"], "status": row["status"],
            "result": row["result"], "error": public_error(row["error"]),
            **{key: iso(row[key]) for key in ("created_at", "running_at", "succeeded_at",
                                               "failed_at")},
        } for row in rows])

    @extend_schema(summary="Events folded from the attempts, in time order (paginated)",
                   responses={200: TimelineEventSerializer(many=True),
                              **_errors(400, 401, 403, 404)})
    @action(detail=True, methods=["get"], pagination_class=RunPartPagination,
            filter_backends=[])
    def timeline(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        rows = self._page(timeline_queryset(run))
        return self.get_paginated_response([timeline_event(row) for row in rows])

    @extend_schema(summary="Server-sent events: `update` on change, `done` when terminal",
                   responses={(200, "text/event-stream"): OpenApiTypes.STR,
                              **_errors(400, 401, 403, 404)})
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer])
    def stream(self, request: Request, pk: str) -> StreamingHttpResponse:
        run = self.get_object()
        events: Any
        if isinstance(request._request, ASGIRequest):
            events = stream.async_events(run.pk)
        else:
            events = stream.sync_events(run.pk)
        response = StreamingHttpResponse(events, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass events on as they come
        return response

    @extend_schema(summary="Resume a suspended run", request=ResumeBodySerializer,
                   responses={200: RunDetailSerializer, **_errors(400, 401, 403, 404, 409, 413)})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(ResumeBodySerializer, request)
        return _run_response(operations.resume_run(run.pk, body["data"]))

    @extend_schema(summary="Cancel a running or suspended run", request=CancelBodySerializer,
                   responses={200: RunDetailSerializer, **_errors(400, 401, 403, 404, 409, 413)})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(CancelBodySerializer, request)
        return _run_response(operations.cancel_run(run.pk, body["reason"]))

    @extend_schema(summary="Retry a failed run from its failed steps",
                   request=RetryBodySerializer,
                   responses={200: RunDetailSerializer, **_errors(400, 401, 403, 404, 409, 413)})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        _body(RetryBodySerializer, request)
        return _run_response(operations.retry_run(run.pk))

    @extend_schema(summary="Answer an approval gate (its policy decides who may)",
                   request=ApproveBodySerializer,
                   responses={200: RunDetailSerializer,
                              **_errors(400, 401, 403, 404, 409, 413)})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = _body(ApproveBodySerializer, request)
        return _run_response(operations.approve_step(
            run.pk, body["reason"], body["decision"], user=request.user))


_STEP_COLUMNS = ("step_name", "status", "rpc_name", "data", "result", "error", "attempt_count",
                 "branch_taken", "child_run_id", "from_step_name", "created_at", "updated_at")


def step_row(row: dict[str, Any]) -> dict[str, Any]:
    """A step's values row as ``StepSerializer`` renders the step (without building it)."""
    child_run = row["child_run_id"]
    return {
        "name": row["step_name"], "status": row["status"], "rpc_name": row["rpc_name"],
        "data": row["data"], "result": row["result"], "error": public_error(row["error"]),
        "attempts": row["attempt_count"], "branch_taken": row["branch_taken"],
        "child_run": str(child_run) if child_run is not None else None,
        "from_step_name": row["from_step_name"], "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


_EVENTS = ("created", "scheduled", "running", "succeeded", "failed")


def timeline_queryset(run: WorkflowRun) -> QuerySet[Any]:
    """The run's timeline events as rows, in time order (ties: attempt, then lifecycle):
    one ``UNION ALL`` branch per attempt timestamp, so that the database sorts and pages
    them (a page reads one page of events, not every attempt of the run)."""
    attempts = StepAttempt.objects.filter(step__run=run).order_by()  # no Meta ordering
    branches = [
        attempts.filter(**{f"{name}_at__isnull": False}).annotate(
            at=F(f"{name}_at"), event_order=Value(order), event=Value(name),
            step_name=F("step__step_name"),
        ).values("at", "id", "event_order", "event", "step_name", "attempt", "error")
        for order, name in enumerate(_EVENTS)
    ]
    return branches[0].union(*branches[1:], all=True).order_by("at", "id", "event_order")


def timeline_event(row: dict[str, Any]) -> dict[str, Any]:
    """A row of :func:`timeline_queryset` as the API shows it."""
    event = {"at": row["at"].isoformat(), "step": row["step_name"], "attempt": row["attempt"],
             "event": row["event"]}
    if row["event"] == "failed":
        event["error"] = public_error(row["error"])
    return event

__all__ = ["RunViewSet", "WorkflowViewSet"]
