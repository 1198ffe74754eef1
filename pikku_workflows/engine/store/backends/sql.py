"""What the SQL backends share: table and column names, parameters, ``UPDATE ... RETURNING``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import JSONField

from ....models import StepAttempt, WorkflowEvent, WorkflowRun, WorkflowStep
from ....status import RunStatus
from ....types import RunId, UserJSON
from .base import StoreBackend, attempt_succeeded_fields, step_succeeded_fields

RUN_TABLE = WorkflowRun._meta.db_table
EVENT_TABLE = WorkflowEvent._meta.db_table
STEP_TABLE = WorkflowStep._meta.db_table
ATTEMPT_TABLE = StepAttempt._meta.db_table
STEP_COLUMNS = ("run_id", "step_name", "rpc_name", "data", "status", "attempt_count",
                "retries", "retry_delay", "from_step_name", "created_at", "updated_at")
ATTEMPT_COLUMNS = ("step_id", "attempt", "status", "result", "created_at", "running_at",
                   "succeeded_at")


class Given(str):
    """In a rule rendered as SQL (``set_clause``): a value given at execution, as this SQL
    expression (a placeholder such as ``%s::jsonb``, or a column of a ``VALUES`` list)."""


def set_clause(fields: dict[str, Any]) -> str:
    """A rule's fields (``step_succeeded_fields``...) as the assignments of an UPDATE:
    a ``Given`` value is its expression, None is NULL, any other a constant of the rule
    (a status) written as a literal, so that the statement keeps one shape."""
    assignments = []
    for column, value in fields.items():
        if isinstance(value, Given):
            expression = str(value)
        elif value is None:
            expression = "NULL"
        else:
            assert str(value).isidentifier(), value  # a status, never user data
            expression = f"'{value}'"
        assignments.append(f"{column} = {expression}")
    return ", ".join(assignments)


def step_succeeded_sql(result: str, at: str) -> str:
    """``step_succeeded_fields`` as SQL assignments, its result and time given as
    these expressions."""
    return set_clause(step_succeeded_fields(Given(result), Given(at)))  # type: ignore[arg-type]


def attempt_succeeded_sql(result: str, at: str) -> str:
    """``attempt_succeeded_fields`` as SQL assignments (see ``step_succeeded_sql``)."""
    return set_clause(attempt_succeeded_fields(Given(result), Given(at)))  # type: ignore[arg-type]


# json.dumps builds an encoder per call when given separators: one, made once.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def to_json(value: UserJSON) -> str | None:
    """A JSON column's value as raw SQL takes it."""
    return None if value is None else _COMPACT.encode(value)


def _default(conn: BaseDatabaseWrapper | None) -> BaseDatabaseWrapper:
    # The hot path passes the connection it looked up once: each ``connection.x`` of
    # Django's proxy looks it up again (a thread-local read, a few per step).
    return connections[DEFAULT_DB_ALIAS] if conn is None else conn


def run_pk(run_id: RunId, conn: BaseDatabaseWrapper | None = None) -> Any:
    """A run id as this database stores it (raw SQL gets no field conversion)."""
    return WorkflowRun._meta.pk.get_db_prep_value(run_id, _default(conn))


def at(value: datetime | None, conn: BaseDatabaseWrapper | None = None) -> Any:
    """A datetime as this database stores it."""
    conn = _default(conn)
    if value is not None and value.tzinfo is UTC and conn.vendor == "sqlite" \
            and conn.timezone is UTC:
        # What Django's adaptation gives for the engine's own (UTC) times, at a fifth of
        # its cost: several per step.
        return str(value.replace(tzinfo=None))
    return conn.ops.adapt_datetimefield_value(value)


def step_values(step: WorkflowStep, now: datetime,
                conn: BaseDatabaseWrapper | None = None) -> list[Any]:
    """The ``STEP_COLUMNS`` of a new step row (SQLite-ready; PostgreSQL casts them)."""
    conn = _default(conn)
    stamp = at(now, conn)
    return [run_pk(step.run_id, conn), step.step_name, step.rpc_name, to_json(step.data),
            step.status, step.attempt_count, step.retries, step.retry_delay,
            step.from_step_name, stamp, stamp]


#: The run's JSON columns: raw SQL takes their values encoded (``to_json``).
RUN_JSON_FIELDS = frozenset(
    f.name for f in WorkflowRun._meta.concrete_fields if isinstance(f, JSONField))


def finish_run_update(run_id: RunId, owner: str | None, changes: dict[str, Any],
                      conn: BaseDatabaseWrapper | None = None, *, json_cast: str = ""
                      ) -> tuple[str, list[Any]]:
    """``finish_run``'s UPDATE, without its RETURNING, and its parameters: ``changes``
    applied to the run while it is running (under ``owner``'s lease, unless None).
    ``json_cast`` follows each JSON value (PostgreSQL's ``::jsonb``)."""
    conn = _default(conn)
    assignments = ", ".join(f"{name} = %s{json_cast}" if name in RUN_JSON_FIELDS
                            else f"{name} = %s" for name in changes)
    params = [to_json(value) if name in RUN_JSON_FIELDS
              else at(value, conn) if isinstance(value, datetime) else value
              for name, value in changes.items()]
    params += [run_pk(run_id, conn), RunStatus.RUNNING]
    guard = ""
    if owner is not None:
        guard = " AND lease_owner = %s"
        params.append(owner)
    return (f"UPDATE {RUN_TABLE} SET {assignments} "  # noqa: S608
            f"WHERE id = %s AND status = %s{guard}"), params


@cache
def _insert_run_sql(columns: tuple[str, ...], watermark: bool) -> str:
    values = ", ".join(["%s"] * len(columns))
    if not watermark:
        return (f"INSERT INTO {RUN_TABLE} ({', '.join(columns)}) "  # noqa: S608
                f"VALUES ({values}) RETURNING event_watermark")
    return (f"INSERT INTO {RUN_TABLE} ({', '.join(columns)}, event_watermark) "  # noqa: S608
            f"VALUES ({values}, (SELECT COALESCE(MAX(id), 0) FROM {EVENT_TABLE})) "
            "RETURNING event_watermark")


class Returning(StoreBackend):
    """Statements that return what they wrote (PostgreSQL, SQLite 3.35+): ``take_lease``
    as one ``UPDATE ... RETURNING``, a run's insert with its event watermark read in
    the same statement."""

    def insert_run(self, run: WorkflowRun, *, watermark: bool) -> None:
        # One statement: no read of the events before it (nor, on SQLite, a write lock
        # taken first so that the read may upgrade), no ORM save.
        conn = connections[DEFAULT_DB_ALIAS]
        fields = [f for f in WorkflowRun._meta.concrete_fields
                  if not (watermark and f.attname == "event_watermark")]
        if not any(f.attname == "event_watermark" for f in WorkflowRun._meta.concrete_fields):
            # The ORM of a schema before the column (tests/unit/test_upgrades.py).
            super().insert_run(run, watermark=False)
            return
        values = [f.get_db_prep_save(f.pre_save(run, True), conn) for f in fields]
        row = self.fetchone(_insert_run_sql(tuple(f.column for f in fields), watermark),
                            values)
        run.event_watermark = row[0]
        run._state.adding, run._state.db = False, conn.alias

    def take_lease(self, run_id: RunId, owner: str, now: datetime, until: datetime, *,
                   unless_in_flight: bool = False) -> WorkflowRun | None:
        pk = run_pk(run_id)
        params: list[Any] = [owner, at(until), pk, RunStatus.RUNNING, at(now), owner]
        in_flight = ""
        if unless_in_flight:
            condition, condition_params = self.in_flight_sql()
            in_flight = (f" AND NOT EXISTS (SELECT 1 FROM {STEP_TABLE} "  # noqa: S608
                         f"WHERE run_id = %s AND {condition})")
            params += [pk, *condition_params]
        rows = list(WorkflowRun.objects.raw(
            f"UPDATE {RUN_TABLE} SET lease_owner = %s, lease_expires_at = %s "  # noqa: S608
            "WHERE id = %s AND status = %s AND (lease_expires_at IS NULL "
            f"OR lease_expires_at < %s OR lease_owner = %s){in_flight} RETURNING *", params))
        return rows[0] if rows else None
