"""Server-sent events of a run: ``update`` on every change, ``done`` when it is terminal.

Under WSGI the stream is a generator with a bounded lifetime (it ends with a ``retry:``
hint, so ``EventSource`` reconnects), under ASGI an async generator. Both poll the run's
row and its steps' latest ``updated_at`` every ``POLL_SECONDS``, and give their database
connection back before each wait, so an open stream holds no connection while it sleeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Count, Max
from django.http import StreamingHttpResponse

from ..engine.summary import run_detail
from ..models import WorkflowRun, WorkflowStep
from ..status import RunStatus
from ..types import RunId

logger = logging.getLogger("pikku_workflows.api")

#: How often an open stream looks at the run.
POLL_SECONDS = 1.0
#: How long one stream lasts before the client reconnects (WSGI workers are precious).
LIFETIME_SECONDS = 30.0
#: The reconnection delay the ``retry:`` field asks ``EventSource`` for.
RETRY_MS = 1000
#: Under WSGI, the longest a stream stays silent: then it writes a comment, so that a
#: client gone is noticed (and its thread and slot freed) within two of these.
HEARTBEAT_SECONDS = 2.0
#: How long a stream's slot outlives the stream at most, should nothing release it (a
#: killed process): longer than any stream lasts.
SLOT_TTL_SECONDS = int(LIFETIME_SECONDS) + 30
#: The ``Retry-After`` of a 429: streams end within LIFETIME_SECONDS, most sooner.
RETRY_AFTER_SECONDS = 5


def take_slot(user_key: str, cap: int | None) -> Callable[[], None] | None:
    """Take one of the ``cap`` stream slots of a user; returns its release, or None when
    all are taken (``cap`` None: no cap, a release that does nothing).

    A slot is a key in Django's default cache, taken with ``cache.add`` (atomic in every
    backend that has it across processes: Redis, Memcached, the database cache), that
    expires after ``SLOT_TTL_SECONDS`` should nothing release it. The release is
    idempotent and frees only the slot's own key (a key expired and taken by another
    stream is left alone).
    """
    if cap is None:
        return lambda: None
    token = uuid.uuid4().hex
    for number in range(cap):
        key = f"pikku_workflows:stream:{user_key}:{number}"
        if cache.add(key, token, timeout=SLOT_TTL_SECONDS):
            return _releaser(key, token)
    return None


def _releaser(key: str, token: str) -> Callable[[], None]:
    released = False

    def release() -> None:
        nonlocal released
        if released:
            return
        try:
            if cache.get(key) == token:
                cache.delete(key)
        except Exception:  # a cache down, or a database cache from async code
            logger.warning("could not release the stream slot %s (it expires in %ss)",
                           key, SLOT_TTL_SECONDS, exc_info=True)
            return
        released = True

    return release


class SlotStreamingResponse(StreamingHttpResponse):
    """A stream holding a slot: released when its events end (the generator's
    ``finally``: the end, a client gone, a cancelled ASGI task), when the server closes
    the response (WSGI always does), or at the latest when the response is collected."""

    def __init__(self, events: Iterator[str] | AsyncIterator[str],
                 release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(_held(events, release) if isinstance(events, Iterator)
                         else _held_async(events, release), **kwargs)
        self.release = release
        weakref.finalize(self, release)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.release()


def _held(events: Iterator[str], release: Callable[[], None]) -> Iterator[str]:
    try:
        yield from events
    finally:
        release()


async def _held_async(events: AsyncIterator[str], release: Callable[[], None]
                      ) -> AsyncIterator[str]:
    try:
        async for text in events:
            yield text
    finally:
        # In a thread: a database cache may not be used from async code.
        await sync_to_async(release)()


def event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, cls=DjangoJSONEncoder)}\n\n"


def _snapshot(run_id: RunId) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """What changed-detection compares (two small queries), and the run detail when asked."""
    run = WorkflowRun.objects.filter(pk=run_id).first()
    if run is None:
        return (None,), None
    # The ORM takes the id as text too; django-stubs allows a UUID only.
    steps = WorkflowStep.objects.filter(run_id=run_id).aggregate(  # type: ignore[misc]
        count=Count("id"), latest=Max("updated_at"))
    return (run.status, run.updated_at, steps["count"], steps["latest"]), {"run": run}


def _release_connection() -> None:
    # Inside a transaction (a test's) the connection must stay; otherwise give it back.
    if not connection.in_atomic_block:
        connection.close()


def _step(run_id: RunId, last: tuple[Any, ...] | None) -> tuple[tuple[Any, ...], list[str], bool]:
    """One look at the run: its signature, the events to send, and whether to stop."""
    signature, found = _snapshot(run_id)
    if found is None:
        return signature, [event("done", {"id": str(run_id), "status": "deleted"})], True
    if signature == last:
        return signature, [], False
    detail = run_detail(found["run"])
    if detail["status"] in RunStatus.terminal():
        return signature, [event("update", detail), event("done", detail)], True
    return signature, [event("update", detail)], False


def sync_events(run_id: RunId, *, lifetime: float | None = None) -> Iterator[str]:
    """The stream for WSGI servers: bounded, then a ``retry:`` hint."""
    deadline = time.monotonic() + (LIFETIME_SECONDS if lifetime is None else lifetime)
    last: tuple[Any, ...] | None = None
    yield f"retry: {RETRY_MS}\n\n"
    written = time.monotonic()
    while True:
        last, events, stop = _step(run_id, last)
        if events:
            yield from events
            written = time.monotonic()
        elif time.monotonic() - written >= HEARTBEAT_SECONDS:
            # A comment, which EventSource ignores: a WSGI server learns that the client
            # went away only when a write fails, and then ends the stream.
            yield ":\n\n"
            written = time.monotonic()
        if stop:
            break
        if time.monotonic() >= deadline:
            yield f"retry: {RETRY_MS}\n\n"
            break
        _release_connection()
        time.sleep(POLL_SECONDS)
    _release_connection()


def _step_and_release(run_id: RunId, last: tuple[Any, ...] | None
                      ) -> tuple[tuple[Any, ...], list[str], bool]:
    try:
        return _step(run_id, last)
    finally:
        _release_connection()


async def async_events(run_id: RunId, *, lifetime: float | None = None) -> AsyncIterator[str]:
    """The stream for ASGI servers: an async generator; waiting costs no thread."""
    deadline = time.monotonic() + (LIFETIME_SECONDS if lifetime is None else lifetime)
    last: tuple[Any, ...] | None = None
    yield f"retry: {RETRY_MS}\n\n"
    while True:
        last, events, stop = await sync_to_async(_step_and_release)(run_id, last)
        for text in events:
            yield text
        if stop:
            return
        if time.monotonic() >= deadline:
            yield f"retry: {RETRY_MS}\n\n"
            return
        await asyncio.sleep(POLL_SECONDS)
