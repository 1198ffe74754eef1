"""Request bodies within ``MAX_INPUT_BYTES``, with or without a ``Content-Length``.

A body with a ``Content-Length`` is refused from the header alone when it is over the
limit (413), and otherwise read by Django as usual. A body without one (sent with
``Transfer-Encoding: chunked``) is where the servers and Django part ways:

- Django's ``WSGIRequest`` takes a missing ``CONTENT_LENGTH`` for an empty body, and DRF
  parses nothing without a length: the body would be lost. A WSGI server that decodes
  chunked bodies says so with ``wsgi.input_terminated`` (gunicorn, mod_wsgi): its
  ``wsgi.input`` then ends where the body ends, and it is read here. A server that does
  not (``wsgiref``, ``runserver``) hands the raw, still chunked, socket over: such a body
  is refused with 411 rather than read as garbage or waited on forever.
- Django's ASGI handler has received the whole body before any view runs, into a
  temporary file that spills to disk past ``FILE_UPLOAD_MAX_MEMORY_SIZE``; it is read
  from there.

Either way at most ``MAX_INPUT_BYTES`` + 1 bytes are read, and a body over the limit is
answered 413 without reading the rest. The body read is put back on the request, with
its length, so that Django and DRF parse it as if it had come with a ``Content-Length``.
"""

from __future__ import annotations

import io
from typing import IO, Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest
from rest_framework import exceptions, status

from .errors import PayloadTooLarge


class LengthRequired(exceptions.APIException):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_detail = ("A chunked request body is not decoded by this server: "
                      "send a Content-Length.")
    default_code = "LENGTH_REQUIRED"


def declared_length(request: HttpRequest) -> int | None:
    """The ``Content-Length`` the client declared, or None (none, or not a number)."""
    raw = request.META.get("CONTENT_LENGTH")
    if raw in (None, ""):
        return None
    try:
        return max(int(raw), 0)
    except (TypeError, ValueError):
        return None


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is over MAX_INPUT_BYTES ({limit} bytes).")


def _unsized_body(request: HttpRequest, limit: int) -> bytes | None:
    """The body sent without a ``Content-Length``, at most ``limit`` + 1 bytes of it, or
    None when there is none (or nothing is left to read).

    Raises:
        LengthRequired: A chunked body on a WSGI server that does not decode it.
    """
    if isinstance(request, ASGIRequest):
        if hasattr(request, "_body"):
            return request._body  # read already (by a middleware)
        if request._read_started:  # type: ignore[attr-defined]
            return None  # read as a stream by someone else: nothing left to measure
        return _read_at_most(request._stream, limit + 1)
    # WSGI: whatever Django read (nothing: it took the body for empty) left the server's
    # input untouched.
    environ: dict[str, Any] = getattr(request, "environ", {})
    if environ.get("wsgi.input_terminated"):
        return _read_at_most(environ["wsgi.input"], limit + 1)
    if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        raise LengthRequired()
    return None  # no length, no chunked body: there is no body


def _read_at_most(source: IO[bytes], size: int) -> bytes:
    parts: list[bytes] = []
    left = size
    while left > 0:
        part = source.read(left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_body_within(request: HttpRequest, limit: int) -> None:
    """Enforce ``limit`` on the request's body, reading a body without a length.

    Raises:
        PayloadTooLarge: The declared length, or the body read, is over ``limit``.
        LengthRequired: A chunked body the WSGI server does not decode.
    """
    declared = declared_length(request)
    if declared is not None:
        if declared > limit:
            raise _too_large(limit)
        return  # Django reads exactly that many bytes, when they are asked for
    body = _unsized_body(request, limit)
    if body is None:
        return
    if len(body) > limit:
        raise _too_large(limit)
    # As if the body had come with its length: DRF parses a body only when it has one.
    request.META["CONTENT_LENGTH"] = str(len(body))
    request._body = body
    request._stream = io.BytesIO(body)
    request._read_started = False  # type: ignore[attr-defined]
