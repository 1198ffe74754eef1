"""SQLite: the checkpoint as plain statements in one transaction (the ORM's statement
building costs more than SQLite itself), the lease with ``UPDATE ... RETURNING`` and
state keys merged with ``json_set``. The other operations are the ORM's."""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction

from ....models import WorkflowStep
from ....status import RunStatus, StepStatus
from ....types import RunId
from .base import Lease, Outcome
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


class SqliteBackend(ReturningLease):
    vendor = "sqlite"

    def write_outcomes(self, batch: list[Outcome]) -> None:
        if not batch:
            return
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {STEP_TABLE} SET status = %s, result = %s, error = NULL, "  # noqa: S608
                "updated_at = %s, lease_expires_at = NULL WHERE id = %s",
                [(StepStatus.SUCCEEDED, to_json(step.result), at(attempt.succeeded_at),
                  step.pk) for step, attempt in batch])
            cursor.executemany(
                f"INSERT INTO {ATTEMPT_TABLE} ({', '.join(ATTEMPT_COLUMNS)}) "  # noqa: S608
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(step.pk, attempt.attempt, StepStatus.SUCCEEDED, to_json(attempt.result),
                  at(attempt.running_at), at(attempt.running_at), at(attempt.succeeded_at))
                 for step, attempt in batch])

    def checkpoint(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                   lease: Lease | None) -> int | None:
        with transaction.atomic():
            self.write_outcomes(batch)
            with connection.cursor() as cursor:
                if lease is not None:
                    cursor.execute(
                        f"UPDATE {RUN_TABLE} SET lease_expires_at = %s "  # noqa: S608
                        "WHERE id = %s AND status = %s AND lease_owner = %s",
                        [at(lease.until), run_pk(lease.run_id), RunStatus.RUNNING, lease.owner])
                    if not cursor.rowcount:
                        return None
                cursor.execute(
                    f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
                    f"VALUES ({', '.join(['%s'] * len(STEP_COLUMNS))})",
                    step_values(step, now))
                step_id: int | None = cursor.lastrowid
                return step_id

    def merge_state_key(self, run_id: RunId, name: str, text: str, now: datetime) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RUN_TABLE} SET state = json_set(COALESCE(state, '{{}}'), "  # noqa: S608
                "%s, json(%s)), updated_at = %s WHERE id = %s",
                ['$."' + name + '"', text, at(now), run_pk(run_id)],
            )
