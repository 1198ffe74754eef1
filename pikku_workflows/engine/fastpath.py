"""The hot writes in raw SQL: one statement each on PostgreSQL, one transaction on SQLite.

On PostgreSQL, data-modifying CTEs let one round trip (an implicit transaction outside
``atomic``) record the previous steps' results and attempts together with what comes
next: the next step's start, the run's end, or a queued step's claim. SQLite (no such
CTEs) gets the checkpoint as plain statements in one transaction and the lease with
``UPDATE ... RETURNING``; other databases take the ORM path.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..status import RunStatus, StepStatus

STEP_COLUMNS = ("run_id", "step_name", "rpc_name", "data", "status", "attempt_count",
                "retries", "retry_delay", "from_step_name", "created_at", "updated_at")
STEP_CASTS = ("uuid", "text", "text", "jsonb", "text", "integer", "integer", "text", "text",
              "timestamptz", "timestamptz")
ATTEMPT_COLUMNS = ("step_id", "attempt", "status", "result", "created_at", "running_at",
                   "succeeded_at")
RUN_TABLE = WorkflowRun._meta.db_table
STEP_TABLE = WorkflowStep._meta.db_table
ATTEMPT_TABLE = StepAttempt._meta.db_table


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _run_pk(run_id: Any) -> Any:
    """A run id as this database stores it (raw SQL gets no field conversion)."""
    return WorkflowRun._meta.pk.get_db_prep_value(run_id, connection)


def _execute(sql: str, params: list[Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _outcomes(pending: list[tuple[WorkflowStep, StepAttempt]]) -> tuple[list[str], list[Any]]:
    """CTEs writing deferred step successes and their attempt rows."""
    if not pending:
        return [], []
    rows = ", ".join(["(%s::bigint, %s::jsonb, %s::timestamptz)"] * len(pending))
    params: list[Any] = [StepStatus.SUCCEEDED]
    for done, attempt in pending:
        params += [done.pk, _json(done.result), attempt.succeeded_at]
    values = ", ".join(["(%s, %s, %s, %s::jsonb, %s, %s, %s)"] * len(pending))
    for done, attempt in pending:
        params += [done.pk, attempt.attempt, StepStatus.SUCCEEDED, _json(attempt.result),
                   attempt.running_at, attempt.running_at, attempt.succeeded_at]
    return [
        f"done AS (UPDATE {STEP_TABLE} AS s SET status = %s, result = v.result, "  # noqa: S608
        "error = NULL, updated_at = v.at, lease_expires_at = NULL "
        f"FROM (VALUES {rows}) AS v(id, result, at) WHERE s.id = v.id)",
        f"hist AS (INSERT INTO {ATTEMPT_TABLE} ({', '.join(ATTEMPT_COLUMNS)}) "  # noqa: S608
        f"VALUES {values})",
    ], params


def _with(ctes: list[str]) -> str:
    return ("WITH " + ", ".join(ctes) + " ") if ctes else ""


def checkpoint(pending: list[tuple[WorkflowStep, StepAttempt]], step: WorkflowStep,
               now: datetime, lease: tuple[Any, str, timedelta] | None) -> int | None:
    """Write ``pending`` outcomes and insert ``step`` (running); returns its id.

    Returns None when ``lease`` is given and the run is no longer running under it
    (the outcomes are written all the same: those steps did run).
    """
    if connection.vendor == "sqlite":
        return _checkpoint_sqlite(pending, step, now, lease)
    ctes, params = _outcomes(pending)
    guard = ""
    if lease is not None:
        run_id, owner, ttl = lease
        ctes.append(
            f"live AS (UPDATE {RUN_TABLE} SET lease_expires_at = %s "  # noqa: S608
            "WHERE id = %s AND status = %s AND lease_owner = %s RETURNING 1)"
        )
        params += [now + ttl, run_id, RunStatus.RUNNING, owner]
        guard = " WHERE EXISTS (SELECT 1 FROM live)"
    select = ", ".join(f"%s::{cast}" for cast in STEP_CASTS)
    params += [step.run_id, step.step_name, step.rpc_name, _json(step.data), step.status,
               step.attempt_count, step.retries, step.retry_delay, step.from_step_name,
               now, now]
    row = _execute(
        _with(ctes) + f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "
        f"SELECT {select}{guard} RETURNING id", params)
    return row[0] if row else None


def _checkpoint_sqlite(pending: list[tuple[WorkflowStep, StepAttempt]], step: WorkflowStep,
                       now: datetime, lease: tuple[Any, str, timedelta] | None) -> int | None:
    """SQLite's checkpoint: the same writes as raw statements in one transaction (the
    ORM's statement building costs more than SQLite itself)."""
    ops = connection.ops

    def at(value: datetime | None) -> Any:
        return ops.adapt_datetimefield_value(value)

    with transaction.atomic(), connection.cursor() as cursor:
        if pending:
            cursor.executemany(
                f"UPDATE {STEP_TABLE} SET status = %s, result = %s, error = NULL, "  # noqa: S608
                "updated_at = %s, lease_expires_at = NULL WHERE id = %s",
                [(StepStatus.SUCCEEDED, _json(done.result), at(attempt.succeeded_at), done.pk)
                 for done, attempt in pending])
            cursor.executemany(
                f"INSERT INTO {ATTEMPT_TABLE} ({', '.join(ATTEMPT_COLUMNS)}) "  # noqa: S608
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(done.pk, attempt.attempt, StepStatus.SUCCEEDED, _json(attempt.result),
                  at(attempt.running_at), at(attempt.running_at), at(attempt.succeeded_at))
                 for done, attempt in pending])
        if lease is not None:
            run_id, owner, ttl = lease
            cursor.execute(
                f"UPDATE {RUN_TABLE} SET lease_expires_at = %s WHERE id = %s "  # noqa: S608
                "AND status = %s AND lease_owner = %s",
                [at(now + ttl), _run_pk(run_id),
                 RunStatus.RUNNING, owner])
            if not cursor.rowcount:
                return None
        cursor.execute(
            f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
            f"VALUES ({', '.join(['%s'] * len(STEP_COLUMNS))})",
            [_run_pk(step.run_id), step.step_name,
             step.rpc_name, _json(step.data), step.status, step.attempt_count, step.retries,
             step.retry_delay, step.from_step_name, at(now), at(now)])
        return cursor.lastrowid


def finish_run(pending: list[tuple[WorkflowStep, StepAttempt]], run_id: Any,
               owner: str | None, changes: dict[str, Any]) -> bool:
    """Write ``pending`` outcomes and end the running run; False if it was not ours."""
    ctes, params = _outcomes(pending)
    json_fields = {"error", "output"}
    assignments = ", ".join(
        f"{name} = %s::jsonb" if name in json_fields else f"{name} = %s" for name in changes)
    params += [_json(v) if k in json_fields else v for k, v in changes.items()]
    params += [run_id, RunStatus.RUNNING]
    guard = ""
    if owner is not None:
        guard = " AND lease_owner = %s"
        params.append(owner)
    return _execute(
        _with(ctes) + f"UPDATE {RUN_TABLE} SET {assignments} "  # noqa: S608
        f"WHERE id = %s AND status = %s{guard} RETURNING 1", params) is not None


def claim_step(step_id: int, now: datetime, lease_until: datetime,
               scheduled_at: datetime | None) -> tuple[int, int] | None:
    """Claim a pending or scheduled step and insert its attempt row: (attempt id, number).

    None when the step was not claimable (a duplicate or late job).
    """
    row = _execute(
        f"WITH c AS (UPDATE {STEP_TABLE} SET status = %s, "  # noqa: S608
        "attempt_count = attempt_count + 1, lease_expires_at = %s, updated_at = %s "
        "WHERE id = %s AND status IN (%s, %s) AND (wake_at IS NULL OR wake_at <= %s) "
        "RETURNING id, attempt_count) "
        f"INSERT INTO {ATTEMPT_TABLE} (step_id, attempt, status, created_at, scheduled_at, "
        "running_at) SELECT id, attempt_count, %s, %s, %s, %s FROM c RETURNING id, attempt",
        [StepStatus.RUNNING, lease_until, now, step_id, StepStatus.PENDING,
         StepStatus.SCHEDULED, now, StepStatus.RUNNING, now, scheduled_at, now])
    return (row[0], row[1]) if row else None


def record_success(step_id: int, attempt: int, result: Any, now: datetime) -> bool:
    """A queued step's success with its attempt row, only while that attempt is current."""
    row = _execute(
        f"WITH ok AS (UPDATE {STEP_TABLE} SET status = %s, result = %s::jsonb, "  # noqa: S608
        "error = NULL, updated_at = %s, lease_expires_at = NULL "
        "WHERE id = %s AND status = %s AND attempt_count = %s RETURNING id) "
        f"UPDATE {ATTEMPT_TABLE} SET status = %s, result = %s::jsonb, succeeded_at = %s "
        "WHERE step_id IN (SELECT id FROM ok) AND attempt = %s RETURNING 1",
        [StepStatus.SUCCEEDED, _json(result), now, step_id, StepStatus.RUNNING, attempt,
         StepStatus.SUCCEEDED, _json(result), now, attempt])
    return row is not None


def take_lease(run_id: Any, owner: str, now: datetime, until: datetime, *,
               unless_in_flight: bool = False) -> WorkflowRun | None:
    """Lease a running run whose lease is free or expired, returning its row (one query).

    With ``unless_in_flight``, only when no queued step or child run of it will still
    report back (the last finisher drives the run on). PostgreSQL and SQLite only.
    """
    ops = connection.ops
    pk = _run_pk(run_id)
    params = [owner, ops.adapt_datetimefield_value(until), pk, RunStatus.RUNNING,
              ops.adapt_datetimefield_value(now), owner]
    in_flight = ""
    if unless_in_flight:
        in_flight = (f" AND NOT EXISTS (SELECT 1 FROM {STEP_TABLE} WHERE run_id = %s "  # noqa: S608
                     "AND rpc_name IS NOT NULL AND status IN (%s, %s))")
        params += [pk, StepStatus.SCHEDULED, StepStatus.RUNNING]
    rows = list(WorkflowRun.objects.raw(
        f"UPDATE {RUN_TABLE} SET lease_owner = %s, lease_expires_at = %s "  # noqa: S608
        "WHERE id = %s AND status = %s AND (lease_expires_at IS NULL OR lease_expires_at < %s "
        f"OR lease_owner = %s){in_flight} RETURNING *", params))
    return rows[0] if rows else None


def claim_named_step(run_id: Any, step_name: str, rpc_name: str, now: datetime,
                     lease_until: datetime) -> WorkflowStep | None:
    """A step job's claim in one statement: find the step by name (calling ``rpc_name``,
    of a running run), claim it and insert its attempt row. PostgreSQL only.

    Returns the claimed step (``status``/``attempt_count`` as claimed) with attributes
    ``pikku_attempt_id``, ``pikku_attempt``, ``pikku_scheduled_at`` and
    ``pikku_owner_id``; None when nothing was claimable (the caller then looks why).
    """
    rows = list(WorkflowStep.objects.raw(
        f"WITH c AS (UPDATE {STEP_TABLE} AS s SET status = %s, "  # noqa: S608
        "attempt_count = s.attempt_count + 1, lease_expires_at = %s, updated_at = %s "
        f"FROM {STEP_TABLE} AS old, {RUN_TABLE} AS r "
        "WHERE s.run_id = %s AND s.step_name = %s AND s.rpc_name = %s "
        "AND s.status IN (%s, %s) AND (s.wake_at IS NULL OR s.wake_at <= %s) "
        "AND old.id = s.id AND r.id = s.run_id AND r.status = %s "
        "RETURNING s.*, old.status AS pikku_old_status, "
        "old.updated_at AS pikku_old_updated_at, r.owner_id AS pikku_owner_id), "
        f"a AS (INSERT INTO {ATTEMPT_TABLE} (step_id, attempt, status, created_at, "
        "scheduled_at, running_at) SELECT id, attempt_count, %s, %s, "
        "CASE WHEN pikku_old_status = %s THEN pikku_old_updated_at END, %s FROM c "
        "RETURNING id AS pikku_attempt_id, attempt AS pikku_attempt, "
        "scheduled_at AS pikku_scheduled_at) "
        "SELECT c.*, a.* FROM c, a",
        [StepStatus.RUNNING, lease_until, now, run_id, step_name, rpc_name,
         StepStatus.PENDING, StepStatus.SCHEDULED, now, RunStatus.RUNNING,
         StepStatus.RUNNING, now, StepStatus.SCHEDULED, now]))
    return rows[0] if rows else None


def record_success_and_lease(step_id: int, attempt: int, result: Any, now: datetime,
                             run_id: Any, owner: str, until: datetime
                             ) -> tuple[bool, WorkflowRun | None]:
    """A queued step's success (as ``record_success``) and, in the same statement, the
    lease of its run for ``owner`` when the run is running, its lease is free and no
    other queued step of it is in flight (as ``take_lease(unless_in_flight=True)`` would
    decide after the success commits). PostgreSQL only.

    Returns:
        Whether the success was recorded (the attempt was still current), and the
        leased run row, or None when the lease was not taken: the caller then commits
        first and looks again (another finisher's snapshot may not see this one's end).
    """
    text = _json(result)
    rows = list(WorkflowRun.objects.raw(
        f"WITH ok AS (UPDATE {STEP_TABLE} SET status = %s, result = %s::jsonb, "  # noqa: S608
        "error = NULL, updated_at = %s, lease_expires_at = NULL "
        "WHERE id = %s AND status = %s AND attempt_count = %s RETURNING id), "
        f"att AS (UPDATE {ATTEMPT_TABLE} SET status = %s, result = %s::jsonb, "
        "succeeded_at = %s WHERE step_id IN (SELECT id FROM ok) AND attempt = %s "
        "RETURNING 1), "
        f"lease AS (UPDATE {RUN_TABLE} SET lease_owner = %s, lease_expires_at = %s "
        "WHERE id = %s AND status = %s AND (lease_expires_at IS NULL "
        "OR lease_expires_at < %s OR lease_owner = %s) AND EXISTS (SELECT 1 FROM ok) "
        f"AND NOT EXISTS (SELECT 1 FROM {STEP_TABLE} WHERE run_id = %s "
        "AND rpc_name IS NOT NULL AND status IN (%s, %s) AND id <> %s) RETURNING *) "
        "SELECT lease.*, (SELECT count(*) FROM att) AS pikku_recorded, "
        f"(SELECT json_agg(s ORDER BY s.id)::text FROM {STEP_TABLE} AS s "
        "WHERE s.run_id = lease.id) "
        "AS pikku_steps FROM (SELECT 1) AS one LEFT JOIN lease ON TRUE",
        [StepStatus.SUCCEEDED, text, now, step_id, StepStatus.RUNNING, attempt,
         StepStatus.SUCCEEDED, text, now, attempt,
         owner, until, run_id, RunStatus.RUNNING, now, owner,
         run_id, StepStatus.SCHEDULED, StepStatus.RUNNING, step_id]))
    row: Any = rows[0]
    if row.pk is None:
        return bool(row.pikku_recorded), None
    # The run's steps as this statement saw them, the step it just ended included as
    # it wrote it: the pass's replay snapshot, without a query of its own.
    steps = _steps_from_json(row.pikku_steps)
    done = next(step for step in steps.values() if step.pk == step_id)
    done.status, done.result, done.error = StepStatus.SUCCEEDED, result, None
    done.updated_at, done.lease_expires_at = now, None
    row.steps_snapshot = steps
    return bool(row.pikku_recorded), row


_STEP_FIELDS = [(f.attname, f.column, f.get_internal_type())
                for f in WorkflowStep._meta.concrete_fields]


def _steps_from_json(text: str | None) -> dict[str, WorkflowStep]:
    """Step rows from ``json_agg`` of the step table, by step name (in id order, as
    ``store.load_steps`` gives them)."""
    steps: dict[str, WorkflowStep] = {}
    for data in json.loads(text) if text else ():
        values = []
        for _, column, kind in _STEP_FIELDS:
            value = data.get(column)
            if value is not None:
                if kind == "DateTimeField":
                    value = datetime.fromisoformat(value)
                elif kind == "ForeignKey":
                    value = uuid.UUID(value)
            values.append(value)
        step = WorkflowStep.from_db(connection.alias, [f[0] for f in _STEP_FIELDS], values)
        steps[step.step_name] = step
    return steps


def release_with_steps(pending: list[tuple[WorkflowStep, StepAttempt]], run_id: Any,
                       owner: str, steps: list[WorkflowStep], now: datetime) -> None:
    """Write ``pending`` outcomes, release the run's lease and, only if it was still
    ``owner``'s, insert ``steps`` (already ``scheduled``): one statement. PostgreSQL only.

    Sets the ids of the steps inserted (none if the lease was no longer ``owner``'s; a
    step another process inserted meanwhile is left to it): their id stays None.
    """
    ctes, params = _outcomes(pending)
    ctes.append(f"rel AS (UPDATE {RUN_TABLE} SET lease_owner = '', "  # noqa: S608
                "lease_expires_at = NULL WHERE id = %s AND lease_owner = %s RETURNING 1)")
    params += [run_id, owner]
    row = "(" + ", ".join(f"%s::{cast}" for cast in STEP_CASTS) + ")"
    for step in steps:
        params += [step.run_id, step.step_name, step.rpc_name, _json(step.data), step.status,
                   step.attempt_count, step.retries, step.retry_delay, step.from_step_name,
                   now, now]
    with connection.cursor() as cursor:
        cursor.execute(
            _with(ctes) + f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
            f"SELECT * FROM (VALUES {', '.join([row] * len(steps))}) AS v "
            "WHERE EXISTS (SELECT 1 FROM rel) ON CONFLICT (run_id, step_name) DO NOTHING "
            "RETURNING id, step_name", params)
        ids = dict((name, pk) for pk, name in cursor.fetchall())
    for step in steps:
        if step.step_name in ids:
            step.pk = step.id = ids[step.step_name]
            step.created_at = step.updated_at = now
            step._state.adding = False
