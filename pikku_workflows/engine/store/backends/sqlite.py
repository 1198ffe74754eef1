"""SQLite: the checkpoint and the run's end as plain statements in one transaction (the
ORM's statement building costs more than SQLite itself), the lease with ``UPDATE ...
RETURNING`` and state keys merged with ``json_set``. The other operations are the ORM's."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction

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
    ReturningLease,
    at,
    run_pk,
    step_values,
    to_json,
)

INSERT_STEP = (f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
               f"VALUES ({', '.join(['%s'] * len(STEP_COLUMNS))})")
SUCCEED_STEP = (f"UPDATE {STEP_TABLE} SET status = %s, result = %s, error = NULL, "  # noqa: S608
                "updated_at = %s, lease_expires_at = NULL WHERE id = %s")
INSERT_ATTEMPT = (f"INSERT INTO {ATTEMPT_TABLE} ({', '.join(ATTEMPT_COLUMNS)}) "  # noqa: S608
                  "VALUES (%s, %s, %s, %s, %s, %s, %s)")


def _write_outcomes(cursor: Any, batch: list[Outcome]) -> None:
    """The outcomes' step updates and attempt rows (each result encoded once)."""
    steps, attempts = [], []
    for step, attempt in batch:
        result = to_json(step.result)
        running, done = at(attempt.running_at), at(attempt.succeeded_at)
        steps.append((StepStatus.SUCCEEDED, result, done, step.pk))
        attempts.append((step.pk, attempt.attempt, StepStatus.SUCCEEDED, result,
                         running, running, done))
    cursor.executemany(SUCCEED_STEP, steps)
    cursor.executemany(INSERT_ATTEMPT, attempts)


class SqliteBackend(ReturningLease):
    vendor = "sqlite"

    def write_outcomes(self, batch: list[Outcome]) -> None:
        if batch:
            with transaction.atomic(savepoint=False), connection.cursor() as cursor:
                _write_outcomes(cursor, batch)

    def checkpoint(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                   lease: Lease | None) -> int | None:
        with transaction.atomic(), connection.cursor() as cursor:
            if batch:
                _write_outcomes(cursor, batch)
            if lease is not None:
                cursor.execute(
                    f"UPDATE {RUN_TABLE} SET lease_expires_at = %s "  # noqa: S608
                    "WHERE id = %s AND status = %s AND lease_owner = %s",
                    [at(lease.until), run_pk(lease.run_id), RunStatus.RUNNING, lease.owner])
                if not cursor.rowcount:
                    return None
            cursor.execute(INSERT_STEP, step_values(step, now))
            step_id: int | None = cursor.lastrowid
            return step_id

    def finish_run(self, batch: list[Outcome], run_id: RunId, owner: str | None,
                   changes: dict[str, Any]) -> Finished:
        assignments = ", ".join(f"{name} = %s" for name in changes)
        params = [to_json(value) if name in ("error", "output")
                  else at(value) if isinstance(value, datetime) else value
                  for name, value in changes.items()]
        params += [run_pk(run_id), RunStatus.RUNNING]
        guard = ""
        if owner is not None:
            guard = " AND lease_owner = %s"
            params.append(owner)
        with transaction.atomic(), connection.cursor() as cursor:
            if batch:
                _write_outcomes(cursor, batch)
            cursor.execute(f"UPDATE {RUN_TABLE} SET {assignments} "  # noqa: S608
                           f"WHERE id = %s AND status = %s{guard} RETURNING state", params)
            row = cursor.fetchone()
        return Finished(row is not None, json.loads(row[0]) if row else None)

    def merge_state_key(self, run_id: RunId, name: str, text: str, now: datetime) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RUN_TABLE} SET state = json_set(COALESCE(state, '{{}}'), "  # noqa: S608
                "%s, json(%s)), updated_at = %s WHERE id = %s",
                ['$."' + name + '"', text, at(now), run_pk(run_id)],
            )
