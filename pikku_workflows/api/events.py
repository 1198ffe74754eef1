"""The REST API's events: ``POST events/`` sends one to the runs waiting for it.

A message to one run (``POST runs/{id}/messages/``) and a run's state keys
(``GET runs/{id}/state/``) are run routes, in ``views.py``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from .. import operations
from .permissions import SendEventPermission
from .schema import PikkuAutoSchema
from .serializers import EventBodySerializer, SentSerializer
from .views import (
    _SEND_IDEMPOTENCY_HEADER,
    _WRITE,
    PikkuAPIMixin,
    _body,
    _errors,
    _idempotency_key,
    sent_response,
)


class EventViewSet(PikkuAPIMixin, viewsets.ViewSet):
    """Events sent from outside (webhooks, other services) to the runs waiting for them."""

    schema = PikkuAutoSchema()

    def get_permissions(self) -> list[Any]:
        return [*super().get_permissions(), SendEventPermission()]

    @extend_schema(
        operation_id="send_event", summary="Send an event to the runs waiting for it",
        description=(
            "Stores the event and wakes every run waiting for it (`wait_for_event` with "
            "this event name and key); a run that reaches its wait later receives it too, "
            "if the run was created before the event was sent. Answers 202 with the "
            "event's id and how many runs it woke. With an idempotency key (in the body or "
            "the `Idempotency-Key` header) sending again with the same content answers 200 "
            "with the first event's id and stores nothing; with other content, 409 "
            "`IDEMPOTENCY_CONFLICT`. Needs the permission `add_workflowevent`."),
        request=EventBodySerializer, parameters=[_SEND_IDEMPOTENCY_HEADER],
        responses={202: OpenApiResponse(SentSerializer, description="The event was stored."),
                   200: OpenApiResponse(SentSerializer, description=(
                       "The event an idempotency key sent before (header "
                       "`Idempotent-Replayed: true`).")),
                   **_errors(*_WRITE, 409)})
    def create(self, request: Request) -> Response:
        body = _body(EventBodySerializer, request)
        key = _idempotency_key(request, body["idempotency_key"])
        result = operations.send_event(body["event"], body["data"], key=body["key"],
                                       idempotency_key=key, sent_by=request.user)
        return sent_response(result)


__all__ = ["EventViewSet"]
