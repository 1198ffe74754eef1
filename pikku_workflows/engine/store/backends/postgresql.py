"""PostgreSQL: each operation in one statement, one round trip.

Data-modifying CTEs let one statement (its own transaction outside ``atomic``) write the
outcomes written behind together with what comes next: the next step's start, the run's
end, the lease's release with the queued steps dispatched, or a queued step's success
with the run's lease for the step worker that carries the run on.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from django.db import connection, connections
from django.db.models import Field, JSONField, Model, QuerySet

from ....conf import pikku_settings
from ....models import WorkflowLimitSlot, WorkflowRun, WorkflowStep
from ....status import RunStatus, StepStatus
from ....types import RunId, UserJSON
from .base import (
    Finished,
    Lease,
    LeasedRun,
    NamedClaim,
    Outcome,
    SlotTake,
    TakenCheckpoint,
    step_succeeded_fields,
)
from .sql import (
    ATTEMPT_COLUMNS,
    ATTEMPT_TABLE,
    RUN_TABLE,
    STEP_COLUMNS,
    STEP_TABLE,
    Returning,
    attempt_succeeded_sql,
    finish_run_update,
    run_pk,
    step_succeeded_sql,
    step_values,
    to_json,
)

STEP_CASTS = ("uuid", "text", "text", "jsonb", "text", "integer", "integer", "text", "text",
              "timestamptz", "timestamptz")
STEP_ROW = "(" + ", ".join(f"%s::{cast}" for cast in STEP_CASTS) + ")"
#: A step's success, from a ``VALUES`` list ``v(id, result, at)`` (outcomes written behind).
SUCCEEDED_FROM_VALUES = step_succeeded_sql("v.result", "v.at")
#: A step's and an attempt's success, result and time given.
STEP_SUCCEEDED = step_succeeded_sql("%s::jsonb", "%s")
ATTEMPT_SUCCEEDED = attempt_succeeded_sql("%s::jsonb", "%s")


def _outcomes(batch: list[Outcome]) -> tuple[list[str], list[Any]]:
    """CTEs writing the outcomes written behind: the steps' success, their attempt rows."""
    if not batch:
        return [], []
    rows = ", ".join(["(%s::bigint, %s::jsonb, %s::timestamptz)"] * len(batch))
    results = [to_json(step.result) for step, _ in batch]  # the attempts' results too
    params: list[Any] = []
    for (step, attempt), result in zip(batch, results, strict=True):
        params += [step.pk, result, attempt.succeeded_at]
    values = ", ".join(["(%s, %s, %s, %s::jsonb, %s, %s, %s)"] * len(batch))
    for (step, attempt), result in zip(batch, results, strict=True):
        params += [step.pk, attempt.attempt, StepStatus.SUCCEEDED, result,
                   attempt.running_at, attempt.running_at, attempt.succeeded_at]
    return [
        f"done AS (UPDATE {STEP_TABLE} AS s SET {SUCCEEDED_FROM_VALUES} "  # noqa: S608
        f"FROM (VALUES {rows}) AS v(id, result, at) WHERE s.id = v.id)",
        f"hist AS (INSERT INTO {ATTEMPT_TABLE} ({', '.join(ATTEMPT_COLUMNS)}) "  # noqa: S608
        f"VALUES {values})",
    ], params


class _PreparingCursor(psycopg.Cursor[Any]):
    """Server-side binding, and every statement prepared on the server on its first run
    on the connection (Django's cursors bind on the client, so the server parses and
    plans every statement again: about a third of a step's write)."""

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool | None = None) -> Any:
        return super().execute(query, params, prepare=prepare is not False, binary=binary)


@contextmanager
def _cursor(prepared: bool) -> Iterator[Any]:
    """A cursor of Django's connection (wrapped, its errors Django's), whose statements
    are prepared when ``prepared`` and the ``PREPARED_STATEMENTS`` setting allow it.
    Callers prepare only statements of a fixed shape: psycopg keeps the last 100 per
    connection. While Django logs queries (``DEBUG``, a test capturing them), the
    statements are not prepared, so that the log shows them with their values."""
    if not (prepared and pikku_settings.PREPARED_STATEMENTS) or connection.queries_logged:
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw_connection = connection.connection
    if raw_connection.prepare_threshold is None:
        # Django turns psycopg's preparing off (None); a threshold no count reaches turns
        # it back on for the statements that ask (ours) and for nothing else.
        raw_connection.prepare_threshold = sys.maxsize
    # make_cursor wraps a DB-API cursor (django-stubs says it takes Django's wrapper).
    raw_cursor: Any = _PreparingCursor(raw_connection)
    with connection.make_cursor(raw_cursor) as cursor:
        yield cursor


def _fetchone(sql: str, params: list[Any], *, prepared: bool = True) -> Any:
    with _cursor(prepared) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


M = TypeVar("M", bound=Model)


def _from_db(field: Field[Any, Any], value: Any) -> Any:
    # Django loads jsonb as text; a JSON field's own converter decodes it.
    return json.loads(value) if isinstance(value, str) and isinstance(field, JSONField) \
        else value


def _models(model: type[M], sql: str, params: list[Any]) -> list[tuple[M, dict[str, Any]]]:
    """``model.objects.raw(sql, params)``, through a prepared statement: the columns of
    ``model`` become its fields (JSON decoded as the ORM does); each row's other columns
    come beside it, by name."""
    with _cursor(True) as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        rows = cursor.fetchall()
    index = {name: i for i, name in enumerate(names)}
    # from_db takes the values in the model's field order, not the statement's.
    fields = [f for f in model._meta.concrete_fields if f.column in index]
    columns = {f.column for f in fields}
    extras = [(i, name) for i, name in enumerate(names) if name not in columns]
    return [(model.from_db(connection.alias, [f.attname for f in fields],
                           [_from_db(f, row[index[f.column]]) for f in fields]),
             {name: row[i] for i, name in extras}) for row in rows]


SLOTS_TABLE = WorkflowLimitSlot._meta.db_table


def _with(ctes: list[str]) -> str:
    return ("WITH " + ", ".join(ctes) + " ") if ctes else ""


class PostgresBackend(Returning):
    vendor = "postgresql"
    takes_slots_in_checkpoint = True

    def estimated_count(self, queryset: QuerySet[Any]) -> int | None:
        if queryset.query.is_empty():
            return 0
        if not queryset.query.where:
            # The whole table: the statistics the planner keeps, one catalog lookup.
            with connections[queryset.db].cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            return int(row[0]) if row and row[0] >= 0 else None
        plan = json.loads(queryset.order_by().explain(format="json"))
        return int(plan[0]["Plan"]["Plan Rows"])

    def write_outcomes(self, batch: list[Outcome]) -> None:
        if batch:
            ctes, params = _outcomes(batch)
            _fetchone(_with(ctes) + "SELECT 1", params, prepared=len(batch) == 1)

    def checkpoint(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                   lease: Lease | None) -> int | None:
        ctes, params = _outcomes(batch)
        guard = ""
        if lease is not None:
            ctes.append(
                f"live AS (UPDATE {RUN_TABLE} SET lease_expires_at = %s "  # noqa: S608
                "WHERE id = %s AND status = %s AND lease_owner = %s RETURNING 1)"
            )
            params += [lease.until, run_pk(lease.run_id), RunStatus.RUNNING, lease.owner]
            guard = " WHERE EXISTS (SELECT 1 FROM live)"
        params += step_values(step, now)
        row = _fetchone(
            _with(ctes) + f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "
            f"SELECT {STEP_ROW[1:-1]}{guard} RETURNING id", params, prepared=len(batch) <= 1)
        return row[0] if row else None

    def checkpoint_taking(self, batch: list[Outcome], step: WorkflowStep, now: datetime,
                          lease: Lease | None, take: SlotTake) -> TakenCheckpoint:
        ctes, params = _outcomes(batch)
        live = ""
        if lease is not None:
            ctes.append(
                f"live AS (UPDATE {RUN_TABLE} SET lease_expires_at = %s "  # noqa: S608
                "WHERE id = %s AND status = %s AND lease_owner = %s RETURNING 1)"
            )
            params += [lease.until, run_pk(lease.run_id), RunStatus.RUNNING, lease.owner]
            live = " AND EXISTS (SELECT 1 FROM live)"
        if take.passed is not None:
            # The slot of the attempt before goes to this one, unless a step waits for
            # the limit (then it is given back, and the waiter woken, apart). Matched by
            # its holder: a slot whose lease lapsed between the steps (it is not renewed
            # there) and that another holder took is not handed over; the step then
            # takes a slot afresh (``_acquire_limits``).
            ctes.append(
                f"taken AS (UPDATE {SLOTS_TABLE} SET holder = %s, until = %s "  # noqa: S608
                "WHERE name = %s AND kind = %s AND slot = %s AND holder = %s AND slot < %s "
                f"AND NOT EXISTS (SELECT 1 FROM {STEP_TABLE} WHERE waiting_for_limit = %s "
                f"AND status = 'scheduled' AND waiting_for_limit <> ''){live} RETURNING slot)")
            params += [take.holder, take.until, take.name, take.kind, take.passed[0],
                       take.passed[1], take.size, take.name]
        else:
            if take.database_time is not None:
                stamp, until = "clock_timestamp()", \
                    "clock_timestamp() + make_interval(secs => %s)"
                until_params: list[Any] = [take.database_time]
                stamp_params: list[Any] = []
            else:
                stamp, until, until_params, stamp_params = "%s", "%s", [take.until], [now]
            ctes.append(
                f"taken AS (UPDATE {SLOTS_TABLE} SET holder = %s, until = {until} "  # noqa: S608
                f"WHERE id = (SELECT id FROM {SLOTS_TABLE} WHERE name = %s AND kind = %s "
                f"AND slot < %s AND until <= {stamp} ORDER BY until LIMIT 1 "
                f"FOR UPDATE SKIP LOCKED){live} RETURNING slot)")
            params += [take.holder, *until_params, take.name, take.kind, take.size,
                       *stamp_params]
        ctes.append(
            f"ins AS (INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
            f"SELECT {STEP_ROW[1:-1]} WHERE EXISTS (SELECT 1 FROM taken) RETURNING id)")
        params += step_values(step, now)
        alive = "EXISTS (SELECT 1 FROM live)" if lease is not None else "TRUE"
        row = _fetchone(
            _with(ctes) + f"SELECT (SELECT id FROM ins), (SELECT slot FROM taken), {alive}",  # noqa: S608
            params, prepared=len(batch) <= 1)
        return TakenCheckpoint(row[0], row[1], bool(row[2]))

    def renew_lease(self, lease: Lease, now: datetime) -> bool:
        return _fetchone(
            f"UPDATE {RUN_TABLE} SET lease_expires_at = %s, updated_at = %s "  # noqa: S608
            "WHERE id = %s AND status = %s AND lease_owner = %s RETURNING 1",
            [lease.until, now, run_pk(lease.run_id), RunStatus.RUNNING, lease.owner],
        ) is not None

    def finish_run(self, batch: list[Outcome], run_id: RunId, owner: str | None,
                   changes: dict[str, Any]) -> Finished:
        ctes, params = _outcomes(batch)
        update, update_params = finish_run_update(run_id, owner, changes, json_cast="::jsonb")
        row = _fetchone(_with(ctes) + update + " RETURNING state::text",
                        params + update_params, prepared=len(batch) <= 1)
        return Finished(row is not None, json.loads(row[0]) if row else None)

    def release_lease(self, batch: list[Outcome], run_id: RunId, owner: str,
                      steps: list[WorkflowStep], now: datetime) -> None:
        ctes, params = _outcomes(batch)
        release = (f"UPDATE {RUN_TABLE} SET lease_owner = '', "  # noqa: S608
                   "lease_expires_at = NULL WHERE id = %s AND lease_owner = %s RETURNING 1")
        params += [run_pk(run_id), owner]
        if not steps:
            _fetchone(_with(ctes) + release, params, prepared=len(batch) <= 1)
            return
        ctes.append(f"rel AS ({release})")
        for step in steps:
            params += step_values(step, now)
        with _cursor(len(batch) <= 1 and len(steps) == 1) as cursor:
            cursor.execute(
                _with(ctes) + f"INSERT INTO {STEP_TABLE} ({', '.join(STEP_COLUMNS)}) "  # noqa: S608
                f"SELECT * FROM (VALUES {', '.join([STEP_ROW] * len(steps))}) AS v "
                "WHERE EXISTS (SELECT 1 FROM rel) ON CONFLICT (run_id, step_name) DO NOTHING "
                "RETURNING id, step_name", params)
            inserted = cursor.fetchall()
        ids = {name: pk for pk, name in inserted}
        for step in steps:
            step.pk = step.id = ids.get(step.step_name)
            if step.pk is not None:
                step.created_at = step.updated_at = now
                step._state.adding = False

    def merge_state_key(self, run_id: RunId, name: str, text: str, now: datetime) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RUN_TABLE} SET state = COALESCE(state, '{{}}'::jsonb) "  # noqa: S608
                "|| jsonb_build_object(%s::text, %s::jsonb), updated_at = %s WHERE id = %s",
                [name, text, now, run_pk(run_id)],
            )

    # --- queued steps -------------------------------------------------------------------

    def fetchone(self, sql: str, params: list[Any]) -> Any:
        return _fetchone(sql, params)

    def fetchall(self, sql: str, params: list[Any]) -> list[Any]:
        with _cursor(True) as cursor:
            cursor.execute(sql, params)
            rows: list[Any] = cursor.fetchall()
        return rows

    def runs(self, sql: str, params: list[Any]) -> list[WorkflowRun]:
        return [run for run, _ in _models(WorkflowRun, sql, params)]

    def claim_step(self, step_id: int, now: datetime, lease_until: datetime,
                   scheduled_at: datetime | None) -> tuple[int, int] | None:
        row = _fetchone(
            f"WITH c AS (UPDATE {STEP_TABLE} SET status = %s, "  # noqa: S608
            "attempt_count = attempt_count + 1, lease_expires_at = %s, updated_at = %s "
            "WHERE id = %s AND status IN (%s, %s) AND (wake_at IS NULL OR wake_at <= %s) "
            "RETURNING id, attempt_count) "
            f"INSERT INTO {ATTEMPT_TABLE} (step_id, attempt, status, created_at, scheduled_at, "
            "running_at) SELECT id, attempt_count, %s, %s, %s, %s FROM c RETURNING id, attempt",
            [StepStatus.RUNNING, lease_until, now, step_id, StepStatus.PENDING,
             StepStatus.SCHEDULED, now, StepStatus.RUNNING, scheduled_at or now, scheduled_at,
             now])
        return (row[0], row[1]) if row else None

    def claim_named_step(self, run_id: RunId, step_name: str, rpc_name: str, now: datetime,
                         lease_until: datetime) -> NamedClaim | None:
        rows = _models(
            WorkflowStep,
            f"WITH c AS (UPDATE {STEP_TABLE} AS s SET status = %s, "  # noqa: S608
            "attempt_count = s.attempt_count + 1, lease_expires_at = %s, updated_at = %s "
            f"FROM {STEP_TABLE} AS old, {RUN_TABLE} AS r "
            "WHERE s.run_id = %s AND s.step_name = %s AND s.rpc_name = %s "
            "AND s.status IN (%s, %s) AND (s.wake_at IS NULL OR s.wake_at <= %s) "
            "AND old.id = s.id AND r.id = s.run_id AND r.status = %s "
            "RETURNING s.*, old.status AS pikku_old_status, "
            "old.updated_at AS pikku_old_updated_at, r.owner_id AS pikku_owner_id), "
            f"a AS (INSERT INTO {ATTEMPT_TABLE} (step_id, attempt, status, created_at, "
            "scheduled_at, running_at) SELECT id, attempt_count, %s, "
            "COALESCE(CASE WHEN pikku_old_status = %s THEN pikku_old_updated_at END, %s), "
            "CASE WHEN pikku_old_status = %s THEN pikku_old_updated_at END, %s FROM c "
            "RETURNING id AS pikku_attempt_id, attempt AS pikku_attempt, "
            "scheduled_at AS pikku_scheduled_at) "
            "SELECT c.*, a.* FROM c, a",
            [StepStatus.RUNNING, lease_until, now, run_pk(run_id), step_name, rpc_name,
             StepStatus.PENDING, StepStatus.SCHEDULED, now, RunStatus.RUNNING,
             StepStatus.RUNNING, StepStatus.SCHEDULED, now, StepStatus.SCHEDULED, now])
        if not rows:
            return None
        step, extra = rows[0]
        return NamedClaim(step, extra["pikku_attempt_id"], extra["pikku_attempt"],
                          extra["pikku_scheduled_at"], extra["pikku_owner_id"])

    def record_success(self, step_id: int, attempt: int, result: UserJSON, now: datetime) -> bool:
        text = to_json(result)
        return _fetchone(
            f"WITH ok AS (UPDATE {STEP_TABLE} SET {STEP_SUCCEEDED} "  # noqa: S608
            "WHERE id = %s AND status = %s AND attempt_count = %s RETURNING id) "
            f"UPDATE {ATTEMPT_TABLE} SET {ATTEMPT_SUCCEEDED} "
            "WHERE step_id IN (SELECT id FROM ok) AND attempt = %s RETURNING 1",
            [text, now, step_id, StepStatus.RUNNING, attempt, text, now, attempt]) is not None

    def record_success_and_lease(self, step_id: int, attempt: int, result: UserJSON, now: datetime,
                                 run_id: RunId, owner: str, until: datetime
                                 ) -> tuple[bool, LeasedRun | None]:
        """The lease is taken when the run is running, its lease free and no other step
        of it in flight; the leased run then comes with its steps as this statement saw
        them (the one it ended as it wrote it). Not taken: the caller commits first and
        looks again (another finisher's snapshot may not see this one's end)."""
        text = to_json(result)
        pk = run_pk(run_id)
        condition, condition_params = self.in_flight_sql()
        rows = _models(
            WorkflowRun,
            f"WITH ok AS (UPDATE {STEP_TABLE} SET {STEP_SUCCEEDED} "  # noqa: S608
            "WHERE id = %s AND status = %s AND attempt_count = %s RETURNING id), "
            f"att AS (UPDATE {ATTEMPT_TABLE} SET {ATTEMPT_SUCCEEDED} "
            "WHERE step_id IN (SELECT id FROM ok) AND attempt = %s RETURNING 1), "
            f"lease AS (UPDATE {RUN_TABLE} SET lease_owner = %s, lease_expires_at = %s "
            "WHERE id = %s AND status = %s AND (lease_expires_at IS NULL "
            "OR lease_expires_at < %s OR lease_owner = %s) AND EXISTS (SELECT 1 FROM ok) "
            f"AND NOT EXISTS (SELECT 1 FROM {STEP_TABLE} WHERE run_id = %s "
            f"AND {condition} AND id <> %s) RETURNING *) "
            "SELECT lease.*, (SELECT count(*) FROM att) AS pikku_recorded, "
            f"(SELECT json_agg(s ORDER BY s.id)::text FROM {STEP_TABLE} AS s "
            "WHERE s.run_id = lease.id) "
            "AS pikku_steps FROM (SELECT 1) AS one LEFT JOIN lease ON TRUE",
            [text, now, step_id, StepStatus.RUNNING, attempt, text, now, attempt,
             owner, until, pk, RunStatus.RUNNING, now, owner,
             pk, *condition_params, step_id])
        run, extra = rows[0]
        if run.pk is None:
            return bool(extra["pikku_recorded"]), None
        steps = _steps_from_json(extra["pikku_steps"])
        done = next(step for step in steps.values() if step.pk == step_id)
        for name, value in step_succeeded_fields(result, now).items():
            setattr(done, name, value)
        return bool(extra["pikku_recorded"]), LeasedRun(run, steps)


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
