"""PostgreSQL's checkpoint in one statement: the last step's outcome and the next start.

Data-modifying CTEs let one round trip (an implicit transaction outside ``atomic``)
record the previous steps' results and attempts, renew the run's lease (proving it was
not cancelled) and insert the next step as running. Other databases take the ORM path.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..status import RunStatus, StepStatus

STEP_COLUMNS = ("run_id", "step_name", "rpc_name", "data", "status", "attempt_count",
                "retries", "retry_delay", "from_step_name", "created_at", "updated_at")
STEP_CASTS = ("uuid", "text", "text", "jsonb", "text", "integer", "integer", "text", "text",
              "timestamptz", "timestamptz")
ATTEMPT_COLUMNS = ("step_id", "attempt", "status", "result", "created_at", "running_at",
                   "succeeded_at")


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def checkpoint(pending: list[tuple[WorkflowStep, StepAttempt]], step: WorkflowStep,
               now: datetime, lease: tuple[Any, str, timedelta] | None) -> int | None:
    """Write ``pending`` outcomes and insert ``step`` (running); returns its id.

    Returns None when ``lease`` is given and the run is no longer running under it
    (the outcomes are written all the same: those steps did run).
    """
    step_table = WorkflowStep._meta.db_table
    ctes: list[str] = []
    params: list[Any] = []
    if pending:
        rows = ", ".join(["(%s::bigint, %s::jsonb, %s::timestamptz)"] * len(pending))
        ctes.append(
            f"done AS (UPDATE {step_table} AS s SET status = %s, result = v.result, "  # noqa: S608
            "error = NULL, updated_at = v.at, lease_expires_at = NULL "
            f"FROM (VALUES {rows}) AS v(id, result, at) WHERE s.id = v.id)"
        )
        params.append(StepStatus.SUCCEEDED)
        for done, attempt in pending:
            params += [done.pk, _json(done.result), attempt.succeeded_at]
        values = ", ".join(["(%s, %s, %s, %s::jsonb, %s, %s, %s)"] * len(pending))
        ctes.append(
            f"hist AS (INSERT INTO {StepAttempt._meta.db_table} "  # noqa: S608
            f"({', '.join(ATTEMPT_COLUMNS)}) VALUES {values})"
        )
        for done, attempt in pending:
            params += [done.pk, attempt.attempt, StepStatus.SUCCEEDED, _json(attempt.result),
                       attempt.running_at, attempt.running_at, attempt.succeeded_at]
    guard = ""
    if lease is not None:
        run_id, owner, ttl = lease
        ctes.append(
            f"live AS (UPDATE {WorkflowRun._meta.db_table} SET lease_expires_at = %s "  # noqa: S608
            "WHERE id = %s AND status = %s AND lease_owner = %s RETURNING 1)"
        )
        params += [now + ttl, run_id, RunStatus.RUNNING, owner]
        guard = " WHERE EXISTS (SELECT 1 FROM live)"
    select = ", ".join(f"%s::{cast}" for cast in STEP_CASTS)
    params += [step.run_id, step.step_name, step.rpc_name, _json(step.data), step.status,
               step.attempt_count, step.retries, step.retry_delay, step.from_step_name,
               now, now]
    sql = (("WITH " + ", ".join(ctes) + " ") if ctes else "") + (
        f"INSERT INTO {step_table} ({', '.join(STEP_COLUMNS)}) "
        f"SELECT {select}{guard} RETURNING id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None
