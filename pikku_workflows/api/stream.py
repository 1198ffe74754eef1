"""Server-sent events of a run: ``update`` on every change, ``done`` when it is terminal.

Under WSGI the stream is a generator with a bounded lifetime (it ends with a ``retry:``
hint, so ``EventSource`` reconnects), under ASGI an async generator. Both poll the run's
row and its steps' latest ``updated_at`` every ``POLL_SECONDS``, and give their database
connection back before each wait, so an open stream holds no connection while it sleeps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Count, Max

from ..engine.summary import run_detail
from ..models import WorkflowRun, WorkflowStep
from ..status import RunStatus
from ..types import RunId

#: How often an open stream looks at the run.
POLL_SECONDS = 1.0
#: How long one stream lasts before the client reconnects (WSGI workers are precious).
LIFETIME_SECONDS = 30.0
#: The reconnection delay the ``retry:`` field asks ``EventSource`` for.
RETRY_MS = 1000


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
    while True:
        last, events, stop = _step(run_id, last)
        yield from events
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
