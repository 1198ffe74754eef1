"""SQLite: the checkpoint and the run's end as plain statements in one transaction (the
ORM's statement building costs more than SQLite itself), the lease with ``UPDATE ...
RETURNING`` and state keys merged with ``json_set``. The other operations are the ORM's."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ....models import WorkflowStep
from ....status import RunStatus, StepStatus
from ....types import RunId
from .base import Finished, Lease, Outcome
from .sql import (
    ATTEMPT_COLUMNS,
    ATTEMPT_TABLE,
    RUN_TABLE,
    STEP_COLUMNS,
    STEP_TABLE,
    Returning,
    at,
    finish_run_update,
    run_pk,
    step_succeeded_sql,
    step_values,
    to_json,
)

INSERT_STEP = (f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
               f"VALUES ({', '.join(['%s'] * len(STEP_COLUMNS))})")
SUCCEED_STEP = (f"UPDATE {STEP_TABLE} SET {step_succeeded_sql('%s', '%s')} "  # noqa: S608
                "WHERE id = %s")
INSERT_ATTEMPT = (f"INSERT INTO {ATTEMPT_TABLE} ({', '.join(ATTEMPT_COLUMNS)}) "  # noqa: S608
                  "VALUES (%s, %s, %s, %s, %s, %s, %s)")


@lru_cache(maxsize=64)
def _qmark(sql: str) -> str:
    return sql.replace("%s", "?")


class _QmarkCursor(sqlite3.Cursor):
    """A cursor of the sqlite3 connection itself that takes Django's ``%s`` placeholders."""

    def execute(self, sql: str, parameters: Any = (), /) -> _QmarkCursor:
        return super().execute(_qmark(sql), parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _QmarkCursor:
        return super().executemany(_qmark(sql), seq_of_parameters)


@contextmanager
def _transaction(conn: BaseDatabaseWrapper, *, savepoint: bool = True) -> Iterator[Any]:
    """A cursor whose statements commit together, for the writes of every step.

    Outside any transaction of Django's, BEGIN and COMMIT go to the sqlite3 connection
    itself: Django's ``atomic`` and cursor wrappers cost about as much as SQLite's own
    work for these few statements (measured in ``benchmarks/ANALYSIS.md``). Inside an
    ``atomic`` block, while Django logs queries (``DEBUG``, tests counting them) or when
    an execute wrapper is installed, the statements go through Django as any others
    (``savepoint``: whether a transaction of the caller's gets one around them).
    """
    if conn.in_atomic_block or not conn.get_autocommit() or conn.queries_logged \
            or conn.execute_wrappers:
        with transaction.atomic(savepoint=savepoint), conn.cursor() as cursor:
            yield cursor
        return
    raw = conn.connection
    cursor = raw.cursor(_QmarkCursor)
    # Django's exceptions, and its connection marked as errored, as with its own cursor.
    with conn.wrap_database_errors:
        # OPTIONS' "transaction_mode", as Django's own BEGIN (getattr: not in the stubs).
        cursor.execute(f"BEGIN {getattr(conn, 'transaction_mode', None) or ''}")
        try:
            yield cursor
            cursor.execute("COMMIT")
        except BaseException:
            # A failed COMMIT (the database busy) leaves the transaction open too.
            if raw.in_transaction:
                raw.rollback()
            raise
        finally:
            cursor.close()


def _write_outcomes(cursor: Any, batch: list[Outcome], conn: BaseDatabaseWrapper) -> None:
    """The outcomes' step updates and attempt rows (each result encoded once)."""
    steps, attempts = [], []
    for step, attempt in batch:
        result = to_json(step.result)
        running, done = at(attempt.running_at, conn), at(attempt.succeeded_at, conn)
        steps.append((result, done, step.pk))
        attempts.append((step.pk, attempt.attempt, StepStatus.SUCCEEDED, result,
                         running, running, done))
    cursor.executemany(SUCCEED_STEP, steps)
    cursor.executemany(INSERT_ATTEMPT, attempts)


class SqliteBackend(Returning):
    vendor = "sqlite"

    def write_outcomes(self, batch: list[Outcome]) -> None:
        if batch:
            conn = connections[DEFAULT_DB_ALIAS]
            with _transaction(conn, savepoint=False) as cursor:
                _write_outcomes(cursor, batch, conn)

    def checkpoint(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                   lease: Lease | None) -> int | None:
        conn = connections[DEFAULT_DB_ALIAS]
        with _transaction(conn) as cursor:
            if batch:
                _write_outcomes(cursor, batch, conn)
            if lease is not None:
                cursor.execute(
                    f"UPDATE {RUN_TABLE} SET lease_expires_at = %s "  # noqa: S608
                    "WHERE id = %s AND status = %s AND lease_owner = %s",
                    [at(lease.until, conn), run_pk(lease.run_id, conn), RunStatus.RUNNING,
                     lease.owner])
                if not cursor.rowcount:
                    return None
            cursor.execute(INSERT_STEP, step_values(step, now, conn))
            step_id: int | None = cursor.lastrowid
            return step_id

    def finish_run(self, batch: list[Outcome], run_id: RunId, owner: str | None,
                   changes: dict[str, Any]) -> Finished:
        conn = connections[DEFAULT_DB_ALIAS]
        update, params = finish_run_update(run_id, owner, changes, conn)
        with _transaction(conn) as cursor:
            if batch:
                _write_outcomes(cursor, batch, conn)
            cursor.execute(update + " RETURNING state", params)
            row = cursor.fetchone()
        return Finished(row is not None, json.loads(row[0]) if row else None)

    def merge_state_key(self, run_id: RunId, name: str, text: str, now: datetime) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RUN_TABLE} SET state = json_set(COALESCE(state, '{{}}'), "  # noqa: S608
                "%s, json(%s)), updated_at = %s WHERE id = %s",
                ['$."' + name + '"', text, at(now), run_pk(run_id)],
            )
