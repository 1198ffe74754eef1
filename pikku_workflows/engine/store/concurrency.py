"""Workflow concurrency slots' rows: a key's lock, the runs live or queued under it, a
queued run's promotion (statements of a fixed shape: PostgreSQL prepares them)."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import F

from ...models import WorkflowRun
from ...status import RunStatus
from ...types import RunId
from .backends import backend
from .backends.sql import at, run_pk

#: ``waiting_for`` of a run queued for a concurrency slot.
WAITING_CONCURRENCY = "concurrency"
#: The first half of PostgreSQL's advisory lock key of a (workflow, key) ("pkku").
_LOCK_CLASS = 0x706B6B75
_RUNS = WorkflowRun._meta.db_table


class SlotRun(NamedTuple):
    """A run live (running or suspended) or queued under a (workflow, key)."""

    created_at: Any  # a datetime (SQLite's text on SQLite: it sorts the same)
    pk: RunId
    workflow: str
    key: str
    parent: RunId | None
    status: str
    code: str | None  # its error's code
    run_timeout: float | None
    queued: bool  # waiting for a slot (else live)


def lock_key(workflow: str, key: str) -> None:
    """Serialize the slot decisions of one (workflow, key) until the transaction ends:
    a PostgreSQL advisory lock, SQLite's write lock."""
    if connection.vendor == "postgresql":
        digest = zlib.crc32(f"{workflow}\0{key}".encode())
        signed = digest - 2**32 if digest >= 2**31 else digest
        backend().fetchone("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_CLASS, signed])
    else:
        # A write first takes the database's write lock (as store.lock_run).
        WorkflowRun.objects.filter(workflow="", concurrency_key="\0").update(
            waiting_for=F("waiting_for"))


def _select(where: str, flag: int) -> str:
    code = ("error ->> 'code'" if connection.vendor == "postgresql"
            else "json_extract(error, '$.code')")
    return (f"SELECT created_at, id, workflow, concurrency_key, parent_run_id, "  # noqa: S608
            f"status, {code}, run_timeout, {flag} FROM {_RUNS} WHERE {where}")


def slot_runs(workflows: Collection[str], keys: Collection[str], *, queued: int = 0
              ) -> list[SlotRun]:
    """The live runs of these workflows and keys, oldest first; with ``queued`` (one
    workflow and key), its ``queued`` first runs waiting for a slot after them: one
    statement."""
    sql = _select(f"workflow IN ({_marks(workflows)}) AND concurrency_key IN "
                  f"({_marks(keys)}) AND status IN (%s, %s)", 0)
    params: list[Any] = [*workflows, *keys, RunStatus.RUNNING, RunStatus.SUSPENDED]
    if queued:
        [workflow], [key] = workflows, keys
        sql += " UNION ALL SELECT * FROM (" + _select(  # noqa: S608
            "workflow = %s AND concurrency_key = %s AND status = %s AND waiting_for = %s "
            "ORDER BY created_at, id LIMIT %s", 1) + ") AS waiting"
        params += [workflow, key, RunStatus.SCHEDULED, WAITING_CONCURRENCY, queued]
    if len(workflows) == len(keys) == 1:
        rows = backend().fetchall(sql, params)
    else:
        # Of a shape that changes with the keys' count: not prepared.
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    runs = [SlotRun(row[0], _run_id(row[1]), row[2], row[3], _run_id(row[4]), row[5],
                    row[6], row[7], bool(row[8])) for row in rows]
    return sorted(runs, key=lambda run: (run.queued, run.created_at, str(run.pk)))


def _marks(values: Collection[str]) -> str:
    return ", ".join(["%s"] * len(values))


def _run_id(value: Any) -> Any:
    return uuid.UUID(value) if isinstance(value, str) else value


def promote_queued(run: SlotRun, now: datetime) -> WorkflowRun | None:
    """Move a run queued for a slot to ``running``, its deadline counting from now if
    it had none; None if it was no longer queued."""
    deadline = None if run.run_timeout is None else now + timedelta(seconds=run.run_timeout)
    found = backend().runs(
        f"UPDATE {_RUNS} SET status = %s, waiting_for = '', "  # noqa: S608
        "deadline_at = COALESCE(deadline_at, %s), updated_at = %s, waiting_since = NULL "
        "WHERE id = %s AND status = %s AND waiting_for = %s RETURNING *",
        [RunStatus.RUNNING, at(deadline), at(now), run_pk(run.pk), RunStatus.SCHEDULED,
         WAITING_CONCURRENCY])
    return found[0] if found else None
