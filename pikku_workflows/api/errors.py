"""Errors as the API answers them: ``{detail, code[, errors]}``, never a trace or SQL."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from ..exceptions import WorkflowError, WorkflowInputError

logger = logging.getLogger("pikku_workflows.api")


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "PAYLOAD_TOO_LARGE"


class QueryError(exceptions.ValidationError):
    """A query string the route cannot take: 400 ``{detail: message, code, errors}``, where
    ``errors`` maps each parameter at fault to its message."""

    def __init__(self, errors: dict[str, str], message: str, code: str = "INVALID") -> None:
        super().__init__({name: [text] for name, text in errors.items()})
        self.message = message
        self.error_code = code


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map pikku_workflows' errors to their HTTP status, and reshape DRF's own answers.

    Scoped to the API's views (they return it from ``get_exception_handler``), so a
    project's global ``EXCEPTION_HANDLER`` is left alone.
    """
    if isinstance(exc, WorkflowError):
        if exc.http_status >= 500:
            # A server-side problem (settings, definitions): its message names settings
            # and code, which are for the logs, not for API clients.
            logger.error("%s while answering an API request: %s", exc.code, exc)
            return Response({"detail": "A server error occurred.", "code": exc.code},
                            status=status.HTTP_500_INTERNAL_SERVER_ERROR)
        data: dict[str, Any] = {"detail": str(exc), "code": exc.code}
        if isinstance(exc, WorkflowInputError) and exc.errors:
            data["errors"] = exc.errors
        return Response(data, status=exc.http_status)
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = response.data
        fields = ", ".join(errors) if isinstance(errors, dict) else ""
        response.data = {
            "detail": f"Invalid request: {fields}." if fields else "Invalid request.",
            "code": "INVALID", "errors": errors,
        }
        if isinstance(exc, QueryError):
            response.data.update(detail=exc.message, code=exc.error_code)
    elif isinstance(exc, exceptions.APIException):
        response.data = {"detail": str(exc.detail), "code": str(exc.get_codes()).upper()}
    return response
