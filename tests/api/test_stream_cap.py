"""``MAX_STREAMS_PER_USER``: a user's open ``runs/{id}/stream/`` are capped (429 JSON with
``Retry-After`` beyond), each slot given back when its stream ends or is closed. On the
WSGI test client here; on real gunicorn and uvicorn, with clients that go away, in
test_real_servers.py."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import override_settings

from pikku_workflows import operations
from pikku_workflows.api import stream
from pikku_workflows.conf import pikku_settings
from pikku_workflows.exceptions import WorkflowConfigurationError

from .conftest import API

pytestmark = pytest.mark.django_db

CAPPED = {"DEFAULT_RETRY_DELAY": 0, "MAX_STREAMS_PER_USER": 2}


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def waiting_run(user):
    """A run left running (a week's sleep) by run/'s timeout."""
    run = operations.run_until_settled("sleeps_a_week", {}, owner=user, timeout=0.01,
                                       return_at_deadline=True)
    assert run.status == "running"
    return run


def close(response):
    """``response.close()`` as the server calls it, less the request_finished signal's
    closing of the database connection (the test's transaction is on it): what Django's
    test client does around its requests."""
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


def open_stream(client, run):
    return client.get(f"{API}runs/{run.pk}/stream/", HTTP_ACCEPT="text/event-stream")


def test_the_cap_answers_429_with_retry_after_and_a_closed_stream_frees_its_slot(
        owner, other, users):
    run = waiting_run(users["owner"])
    with override_settings(PIKKU_WORKFLOWS=CAPPED):
        first, second = open_stream(owner, run), open_stream(owner, run)
        assert first.status_code == second.status_code == 200
        refused = open_stream(owner, run)
        assert refused.status_code == 429
        assert refused["Content-Type"] == "application/json"
        assert refused["Retry-After"] == str(stream.RETRY_AFTER_SECONDS)
        body = refused.json()
        assert body["code"] == "TOO_MANY_STREAMS" and "MAX_STREAMS_PER_USER" in body["detail"]
        # Another user's streams are counted apart; a run they cannot see takes no slot.
        assert open_stream(other, run).status_code == 404
        other_run = waiting_run(users["other"])
        assert open_stream(other, other_run).status_code == 200
        close(first)  # what the server does when the stream ends or its client goes
        third = open_stream(owner, run)
        assert third.status_code == 200
        assert open_stream(owner, run).status_code == 429
        close(second)
        close(third)


def test_a_stream_that_ends_gives_its_slot_back(owner, users):
    done = operations.run_until_settled("sequential", {"x": 1}, owner=users["owner"])
    with override_settings(PIKKU_WORKFLOWS={**CAPPED, "MAX_STREAMS_PER_USER": 1}):
        response = open_stream(owner, done)
        text = b"".join(response.streaming_content).decode()
        assert "event: done" in text
        # Ended (not closed yet): the generator's finally gave the slot back.
        again = open_stream(owner, done)
        assert again.status_code == 200
        close(again)
        close(response)


def test_an_unstarted_stream_dropped_gives_its_slot_back(owner, users):
    import gc

    run = waiting_run(users["owner"])
    with override_settings(PIKKU_WORKFLOWS={**CAPPED, "MAX_STREAMS_PER_USER": 1}):
        response = open_stream(owner, run)
        assert open_stream(owner, run).status_code == 429
        del response  # never iterated nor closed (an ASGI task cancelled early)
        gc.collect()
        response = open_stream(owner, run)
        assert response.status_code == 200
        close(response)


def test_no_cap_with_none():
    with override_settings(PIKKU_WORKFLOWS={"MAX_STREAMS_PER_USER": None}):
        assert pikku_settings.MAX_STREAMS_PER_USER is None
        releases = [stream.take_slot("7", None) for _ in range(50)]
        assert all(releases)


@pytest.mark.parametrize("value", [0, -1, True, "4", 2.5])
def test_an_invalid_cap_is_a_configuration_error(value):
    with override_settings(PIKKU_WORKFLOWS={"MAX_STREAMS_PER_USER": value}), \
            pytest.raises(WorkflowConfigurationError, match="MAX_STREAMS_PER_USER"):
        _ = pikku_settings.MAX_STREAMS_PER_USER


def test_a_slot_expires_should_nothing_release_it(users):
    release = stream.take_slot("9", 1)
    assert release is not None and stream.take_slot("9", 1) is None
    # A killed process never releases: the key's own expiry frees the slot.
    cache.delete("pikku_workflows:stream:9:0")  # (what SLOT_TTL_SECONDS does)
    other = stream.take_slot("9", 1)
    assert other is not None
    release()  # the first stream's late release leaves the new holder's slot alone
    assert stream.take_slot("9", 1) is None
    other()
    assert stream.take_slot("9", 1) is not None
