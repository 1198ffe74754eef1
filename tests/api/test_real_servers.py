"""Request bodies on real servers: gunicorn (WSGI) and uvicorn (ASGI) serving the test
project in a subprocess, against the test database (committed rows: ``transactional_db``;
the SQLite test database is a file both processes open).

A body sent with ``Transfer-Encoding: chunked`` has no ``Content-Length``: Django's
``WSGIRequest`` reads such a body as empty, and DRF parses nothing without a length, so
it is read by the API itself, never more than ``MAX_INPUT_BYTES`` + 1 bytes of it.
"""

from __future__ import annotations

import base64
import json
import socket
import time

import pytest

from pikku_workflows.models import WorkflowRun
from tests.services import HTTPServer, wait_for

from .conftest import API

pytestmark = pytest.mark.django_db(transaction=True)

START = f"{API}workflows/sequential/start/"
AUTH = "Basic " + base64.b64encode(b"owner:pw").decode()
LIMIT = 1024 * 1024  # MAX_INPUT_BYTES's default


#: The server's settings for the stream tests: one stream per user.
STREAMS = {"DEFAULT_RETRY_DELAY": 0, "MAX_STREAMS_PER_USER": 1}


@pytest.fixture(params=["wsgi", "asgi"])
def server(request, django_user_model):
    """A server of each kind (or ``(kind, settings)`` given by indirect parametrization)."""
    django_user_model.objects.create_user("owner", password="pw")
    kind, settings = request.param if isinstance(request.param, tuple) else (
        request.param, None)
    served = HTTPServer(kind, settings)
    yield served
    served.close()


def chunks(body: bytes, size: int = 1000):
    for at in range(0, len(body), size):
        yield body[at:at + size]


def post_chunked(server: HTTPServer, body: bytes, path: str = START):
    """POST ``body`` with ``Transfer-Encoding: chunked`` (no Content-Length)."""
    conn = server.connection()
    try:
        conn.request("POST", path, body=chunks(body), encode_chunked=True, headers={
            "Authorization": AUTH, "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def raw_exchange(server: HTTPServer, head: bytes, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``) on a socket and read the answer until the server
    closes; the server is expected to answer without waiting for more."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + body)
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
            if b"\r\n\r\n" in answer:
                headers, _, rest = answer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in headers.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(rest) >= length:
                    break
        return answer


def test_a_chunked_json_body_is_read_and_stored(server):
    data = {"x": 4, "note": "é" * 3000}  # several chunks
    status, _, answer = post_chunked(server, json.dumps({"data": data}).encode())
    assert status == 202, (answer, server.output()[-2000:])
    run = WorkflowRun.objects.get(pk=json.loads(answer)["id"])
    assert run.input == data and run.status == "completed"
    assert run.output == {"total": 5, "doubled": 10}


def test_a_chunked_body_over_the_limit_is_413_and_writes_nothing(server):
    body = json.dumps({"data": {"x": 1, "pad": "p" * (LIMIT + 100_000)}}).encode()
    status, headers, answer = post_chunked(server, body)
    assert status == 413, (answer, server.output()[-2000:])
    assert headers["Content-Type"] == "application/json"
    assert json.loads(answer)["code"] == "PAYLOAD_TOO_LARGE"
    assert not WorkflowRun.objects.exists()


def test_a_chunked_body_at_the_limit_is_accepted(server):
    body = json.dumps({"data": {"x": 1}}).encode()
    body += b" " * (LIMIT - len(body))  # JSON allows trailing whitespace
    status, _, answer = post_chunked(server, body)
    assert status == 202, answer
    assert WorkflowRun.objects.get().input == {"x": 1}


def test_a_declared_length_over_the_limit_is_413(server):
    head = (f"POST {START} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {AUTH}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {LIMIT + 1}\r\n"
            "Connection: close\r\n\r\n").encode()
    if server.kind == "wsgi":
        # Under WSGI the view answers from the header alone: no byte of the body is sent,
        # and the answer still comes (a read of it would wait for the body).
        answer = raw_exchange(server, head)
    else:
        # Django's ASGI handler receives the whole body before any view runs (spooled to
        # a temporary file past FILE_UPLOAD_MAX_MEMORY_SIZE); the view does not read it.
        answer = raw_exchange(server, head, b" " * (LIMIT + 1))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:500]
    assert b'"code":"PAYLOAD_TOO_LARGE"' in answer.replace(b" ", b"")
    assert not WorkflowRun.objects.exists()


def test_run_gives_its_thread_back_at_the_timeout(server):
    # A week's sleep would hold the server's thread for a week; the request ends at
    # the timeout, and the run waits in the database for recovery.
    conn = server.connection()
    started = time.monotonic()
    conn.request("POST", f"{API}workflows/sleeps_a_week/run/",
                 body=json.dumps({"data": {}, "timeout": 1}), headers={
                     "Authorization": AUTH, "Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 202 and answer["status"] == "running", answer
    assert 0.9 <= time.monotonic() - started < 5
    assert response.getheader("Location") == (
        f"http://127.0.0.1:{server.port}{API}runs/{answer['id']}/")
    run = WorkflowRun.objects.get(pk=answer["id"])
    assert run.status == "running" and run.lease_owner == ""


def open_stream(server: HTTPServer, run_id):
    conn = server.connection()
    conn.request("GET", f"{API}runs/{run_id}/stream/", headers={
        "Authorization": AUTH, "Accept": "text/event-stream"})
    return conn, conn.getresponse()


@pytest.mark.parametrize("server", [("wsgi", STREAMS), ("asgi", STREAMS)], indirect=True,
                         ids=["wsgi", "asgi"])
def test_a_client_gone_gives_its_stream_slot_back(server, django_user_model):
    from pikku_workflows import operations

    user = django_user_model.objects.get(username="owner")
    run = operations.run_until_settled("sleeps_a_week", {}, owner=user, timeout=0.01,
                                       return_at_deadline=True)
    first, streaming = open_stream(server, run.pk)
    assert streaming.status == 200 and streaming.readline().startswith(b"retry:")
    second, refused = open_stream(server, run.pk)
    assert refused.status == 429 and refused.getheader("Retry-After")
    assert json.loads(refused.read())["code"] == "TOO_MANY_STREAMS"
    second.close()
    first.sock.shutdown(socket.SHUT_RDWR)  # the client goes away mid-stream
    first.close()

    def reopened():
        conn, response = open_stream(server, run.pk)
        conn.close()
        return response.status == 200

    # ASGI: Django sees the disconnect at once; WSGI: at the next heartbeat's write.
    started = time.monotonic()
    wait_for(reopened, timeout=15, interval=0.5)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_the_stream_cap_holds_across_worker_processes_sharing_a_cache(kind, django_user_model):
    """Two server processes and Django's database cache: one stream per user in all,
    whichever process each connection lands on (with a per-process cache, about one try
    in two would get a second stream)."""
    from django.core.management import call_command

    from pikku_workflows import operations

    call_command("createcachetable", "pikku_test_cache", verbosity=0)
    user = django_user_model.objects.create_user("owner", password="pw")
    run = operations.run_until_settled("sleeps_a_week", {}, owner=user, timeout=0.01,
                                       return_at_deadline=True)
    served = HTTPServer(kind, STREAMS, workers=2, extra_env={"PIKKU_TEST_CACHE": "database"})
    try:
        first, streaming = open_stream(served, run.pk)
        assert streaming.status == 200
        for _ in range(8):  # new connections, spread over both processes by the kernel
            conn, refused = open_stream(served, run.pk)
            assert refused.status == 429, (kind, refused.status)
            conn.close()
        first.close()
    finally:
        served.close()
