"""``bodies.read_body_within`` on hand-built WSGI requests: what a server hands over
without a ``Content-Length`` (the real servers are in test_real_servers.py)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.handlers.wsgi import WSGIRequest
from django.test import RequestFactory

from pikku_workflows.api.bodies import LengthRequired, read_body_within
from pikku_workflows.api.errors import PayloadTooLarge


class Endless(io.RawIOBase):
    """A body that never ends, counting the bytes read from it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = 4096 if size is None or size < 0 else min(size, 4096)
        self.read_bytes += size
        return b" " * size


def unsized(body, **environ) -> WSGIRequest:
    """A POST whose body comes without CONTENT_LENGTH (as a chunked one does)."""
    made = RequestFactory().post("/", data=b"", content_type="application/json").environ
    made = dict(made)
    made.pop("CONTENT_LENGTH", None)
    made.update({"wsgi.input": body, "HTTP_TRANSFER_ENCODING": "chunked", **environ})
    return WSGIRequest(made)


def test_django_alone_reads_a_body_without_length_as_empty():
    # The defect: what the API saw before it read such bodies itself.
    assert unsized(io.BytesIO(b'{"data": 1}'), **{"wsgi.input_terminated": True}).body == b""


def test_a_terminated_input_is_read_and_given_its_length():
    request = unsized(io.BytesIO(b'{"data": 1}'), **{"wsgi.input_terminated": True})
    read_body_within(request, 100)
    assert request.META["CONTENT_LENGTH"] == "11"
    assert json.loads(request.read()) == {"data": 1} and request.body == b'{"data": 1}'


def test_never_more_than_the_limit_plus_one_byte_is_read():
    endless = Endless()
    request = unsized(endless, **{"wsgi.input_terminated": True})
    with pytest.raises(PayloadTooLarge):
        read_body_within(request, 10_000)
    assert endless.read_bytes == 10_001


def test_a_chunked_body_the_server_does_not_decode_is_411_unread():
    endless = Endless()
    with pytest.raises(LengthRequired):
        read_body_within(unsized(endless), 100)  # wsgiref: the raw socket, still chunked
    assert endless.read_bytes == 0


def test_no_length_and_nothing_chunked_is_no_body():
    endless = Endless()
    request = unsized(endless, HTTP_TRANSFER_ENCODING="")
    read_body_within(request, 100)
    assert endless.read_bytes == 0 and request.body == b""


def test_a_declared_length_over_the_limit_is_refused_unread():
    endless = Endless()
    request = unsized(endless, CONTENT_LENGTH="101")
    with pytest.raises(PayloadTooLarge):
        read_body_within(request, 100)
    assert endless.read_bytes == 0


def test_a_body_django_already_took_for_empty_is_still_read():
    # A middleware that read request.body before the view got b"" (no length): the
    # server's input is untouched, and the view reads it.
    request = unsized(io.BytesIO(b'{"data": 2}'), **{"wsgi.input_terminated": True})
    assert request.body == b""
    read_body_within(request, 100)
    assert request.body == b'{"data": 2}' and json.loads(request.read()) == {"data": 2}
