"""The store backend contract, run against the backend of the current database.

The SQLite pass of the suite checks ``SqliteBackend``, the PostgreSQL pass
``PostgresBackend``; the generic ORM backend (any other database) is checked too, on
whichever database runs. Each test is one operation's rule: who wins, what is refused,
which rows it leaves.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pikku_workflows.engine.store.backends import (
    IN_FLIGHT_STATUSES,
    Lease,
    StoreBackend,
    backend,
    in_flight,
    step_succeeded_fields,
)
from pikku_workflows.engine.store.backends.postgresql import PostgresBackend
from pikku_workflows.engine.store.backends.sql import STEP_TABLE
from pikku_workflows.engine.store.backends.sqlite import SqliteBackend
from pikku_workflows.engine.store.backends.sqlite import _transaction as sqlite_transaction
from pikku_workflows.engine.store.rows import new_attempt, unsaved
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["vendor", "generic"])
def db(request: pytest.FixtureRequest) -> StoreBackend:
    """The backend chosen for this database, and the generic ORM one."""
    return backend() if request.param == "vendor" else StoreBackend()


def now() -> datetime:
    return timezone.now()


def new_run(**fields: Any) -> WorkflowRun:
    return WorkflowRun.objects.create(workflow="contract", input={}, **fields)


def new_step(run: WorkflowRun, name: str, **fields: Any) -> WorkflowStep:
    fields.setdefault("rpc_name", "fn")
    return WorkflowStep.objects.create(run=run, step_name=name, **fields)


def unsaved_step(run: WorkflowRun, name: str, status: str = StepStatus.RUNNING) -> WorkflowStep:
    return WorkflowStep(run_id=run.pk, step_name=name, rpc_name="fn", data={"n": 1},
                        status=status, attempt_count=1 if status == StepStatus.RUNNING else 0)


def outcome(step: WorkflowStep, result: Any) -> tuple[WorkflowStep, StepAttempt]:
    """A step's success written behind, as ``store.record_success(defer=True)`` keeps it."""
    at = now()
    step.result = result
    return step, StepAttempt(step=step, attempt=step.attempt_count, status=StepStatus.SUCCEEDED,
                             result=result, running_at=at, succeeded_at=at)


def assert_written(step: WorkflowStep, result: Any) -> None:
    step.refresh_from_db()
    assert (step.status, step.result) == (StepStatus.SUCCEEDED, result)
    assert list(step.attempts.values_list("status", "result")) == [
        (StepStatus.SUCCEEDED, result)]


# --- selection ---------------------------------------------------------------------------


def test_the_backend_is_the_vendors_chosen_once() -> None:
    expected = {"postgresql": PostgresBackend, "sqlite": SqliteBackend}.get(
        connection.vendor, StoreBackend)
    assert type(backend()) is expected
    assert backend() is backend()


# --- in flight ------------------------------------------------------------------------------


def test_in_flight_is_one_rule_in_the_orm_and_in_sql(db: StoreBackend) -> None:
    run = new_run()
    expected = set()
    for rpc_name in (None, "fn"):
        for status in StepStatus.values:
            step = new_step(run, f"{rpc_name}-{status}", rpc_name=rpc_name, status=status)
            if rpc_name is not None and status in IN_FLIGHT_STATUSES:
                expected.add(step.pk)
    orm = set(WorkflowStep.objects.filter(in_flight(), run=run).values_list("pk", flat=True))
    condition, params = db.in_flight_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {STEP_TABLE} WHERE {condition}", params)
        sql = {row[0] for row in cursor.fetchall()}
    assert orm == sql == expected
    assert expected and IN_FLIGHT_STATUSES == (StepStatus.SCHEDULED, StepStatus.RUNNING)


# --- the lease ------------------------------------------------------------------------------


def test_a_lease_is_taken_once_until_it_expires(db: StoreBackend) -> None:
    run = new_run()
    t = now()
    leased = db.take_lease(run.pk, "a", t, t + timedelta(seconds=30))
    assert leased is not None and leased.pk == run.pk and leased.lease_owner == "a"
    assert db.take_lease(run.pk, "b", t, t + timedelta(seconds=30)) is None
    assert db.take_lease(run.pk, "a", t, t + timedelta(seconds=30)) is not None  # ours again
    later = t + timedelta(seconds=31)
    taken = db.take_lease(run.pk, "b", later, later + timedelta(seconds=30))
    assert taken is not None and taken.lease_owner == "b"


def test_only_a_running_run_is_leased(db: StoreBackend) -> None:
    for status in (RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.CANCELLED):
        run = new_run(status=status)
        assert db.take_lease(run.pk, "a", now(), now() + timedelta(seconds=30)) is None


def test_unless_in_flight_refuses_while_a_queued_step_is_out(db: StoreBackend) -> None:
    run = new_run()
    t, until = now(), now() + timedelta(seconds=30)
    new_step(run, "sleep", rpc_name=None, status=StepStatus.SCHEDULED)  # not in flight
    new_step(run, "done", status=StepStatus.SUCCEEDED)
    queued = new_step(run, "queued", status=StepStatus.SCHEDULED)
    assert db.take_lease(run.pk, "a", t, until, unless_in_flight=True) is None
    WorkflowStep.objects.filter(pk=queued.pk).update(status=StepStatus.SUCCEEDED)
    assert db.take_lease(run.pk, "a", t, until, unless_in_flight=True) is not None


def test_renewing_a_lease_proves_the_run_is_ours_and_running(db: StoreBackend) -> None:
    run = new_run(lease_owner="a", lease_expires_at=now())
    until = now() + timedelta(seconds=30)
    assert db.renew_lease(Lease(run.pk, "a", until), now())
    assert not db.renew_lease(Lease(run.pk, "b", until), now())
    WorkflowRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    assert not db.renew_lease(Lease(run.pk, "a", until), now())


def test_a_release_inserts_the_dispatched_steps_only_while_the_lease_is_ours(
        db: StoreBackend) -> None:
    run = new_run(lease_owner="a", lease_expires_at=now() + timedelta(seconds=30))
    done = outcome(new_step(run, "done", status=StepStatus.RUNNING, attempt_count=1), {"x": 1})
    new_step(run, "there", status=StepStatus.SCHEDULED)
    steps = [unsaved_step(run, "next", StepStatus.SCHEDULED),
             unsaved_step(run, "there", StepStatus.SCHEDULED)]
    db.release_lease([done], run.pk, "b", steps, now())  # not b's: nothing inserted
    assert [step.pk for step in steps] == [None, None]
    assert not WorkflowStep.objects.filter(run=run, step_name="next").exists()
    assert_written(done[0], {"x": 1})  # the outcomes are written all the same
    db.release_lease([], run.pk, "a", steps, now())
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert steps[0].pk == WorkflowStep.objects.get(run=run, step_name="next").pk
    assert steps[1].pk is None  # inserted by another process meanwhile: left to it


def test_a_release_without_steps_releases(db: StoreBackend) -> None:
    run = new_run(lease_owner="a", lease_expires_at=now() + timedelta(seconds=30))
    db.release_lease([], run.pk, "a", [], now())
    assert WorkflowRun.objects.get(pk=run.pk).lease_owner == ""


# --- outcomes and the checkpoint -----------------------------------------------------------


def test_outcomes_written_behind_mark_steps_and_insert_attempts(db: StoreBackend) -> None:
    run = new_run()
    batch = [outcome(new_step(run, f"s{i}", status=StepStatus.RUNNING, attempt_count=1), i)
             for i in range(3)]
    db.write_outcomes(batch)
    db.write_outcomes([])
    for (step, _), i in zip(batch, range(3), strict=True):
        assert_written(step, i)


def test_a_checkpoint_writes_the_outcomes_and_inserts_the_next_step(db: StoreBackend) -> None:
    run = new_run(lease_owner="a", lease_expires_at=now())
    done = outcome(new_step(run, "done", status=StepStatus.RUNNING, attempt_count=1), [1])
    step = unsaved_step(run, "next")
    t = now()
    step_id = db.checkpoint([done], step, t, Lease(run.pk, "a", t + timedelta(seconds=30)))
    row = WorkflowStep.objects.get(pk=step_id)
    assert (row.step_name, row.status, row.attempt_count, row.data) == (
        "next", StepStatus.RUNNING, 1, {"n": 1})
    assert WorkflowRun.objects.get(pk=run.pk).lease_expires_at == t + timedelta(seconds=30)
    assert_written(done[0], [1])
    assert db.checkpoint([], unsaved_step(run, "free"), now(), None) is not None


def test_a_failed_checkpoint_writes_nothing(db: StoreBackend) -> None:
    run = new_run()
    done = outcome(new_step(run, "done", status=StepStatus.RUNNING, attempt_count=1), "r")
    new_step(run, "taken")
    with pytest.raises(IntegrityError):  # a statement fails: the unique step name
        db.checkpoint([done], unsaved_step(run, "taken"), now(), None)
    gone = unsaved_step(run, "orphan")
    gone.run_id = uuid.uuid4()
    with pytest.raises(IntegrityError):  # the commit fails: the deferred foreign key
        db.checkpoint([done], gone, now(), None)
    row = WorkflowStep.objects.get(pk=done[0].pk)
    assert (row.status, row.result, row.attempts.count()) == (StepStatus.RUNNING, None, 0)
    assert not connection.in_atomic_block
    assert db.checkpoint([done], unsaved_step(run, "next"), now(), None) is not None
    assert_written(done[0], "r")


@pytest.mark.sqlite_only
def test_sqlite_commits_on_its_own_connection_unless_django_is_watching() -> None:
    def direct() -> bool:
        with sqlite_transaction(connection) as cursor:
            return isinstance(cursor, sqlite3.Cursor)

    assert direct()
    with transaction.atomic():
        assert not direct()  # the caller's transaction decides
    with CaptureQueriesContext(connection):
        assert not direct()  # the query log keeps every statement
    with connection.execute_wrapper(lambda execute, *args: execute(*args[:3])):
        assert not direct()  # so does instrumentation


def _checkpoints_prepared() -> list[int]:
    """How many times each prepared checkpoint statement of this connection ran."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT generic_plans + custom_plans FROM pg_prepared_statements "
                       f"WHERE statement LIKE 'INSERT INTO {STEP_TABLE} %%'")
        return [row[0] for row in cursor.fetchall()]


def _two_checkpoints() -> None:
    run = new_run()
    for name in ("one", "two"):
        assert backend().checkpoint([], unsaved_step(run, name), now(), None) is not None


@pytest.mark.postgres_only
def test_postgresql_prepares_the_checkpoint_once_per_connection() -> None:
    connection.close()  # a new connection has nothing prepared
    _two_checkpoints()
    assert _checkpoints_prepared() == [2]  # one statement, parsed once, run twice


@pytest.mark.postgres_only
def test_no_statement_is_prepared_when_the_setting_is_off(settings: Any) -> None:
    settings.PIKKU_WORKFLOWS = {"PREPARED_STATEMENTS": False}
    connection.close()
    _two_checkpoints()
    assert _checkpoints_prepared() == []


@pytest.mark.postgres_only
def test_logged_queries_are_not_prepared_and_show_their_values() -> None:
    connection.close()
    with CaptureQueriesContext(connection) as queries:
        _two_checkpoints()
    assert _checkpoints_prepared() == []
    inserts = [q["sql"] for q in queries.captured_queries if "'two'" in q["sql"]]
    assert len(inserts) == 1 and inserts[0].startswith(f"INSERT INTO {STEP_TABLE}")


def test_a_run_is_inserted_with_the_event_watermark_of_its_insert(db: StoreBackend) -> None:
    from pikku_workflows.engine.store.runs import new_run as build_run
    from pikku_workflows.models import WorkflowEvent

    assert db.event_watermark() == 0
    run = build_run(workflow="contract", input={"n": 1}, wire={"w": [1]})
    db.insert_run(run, watermark=True)
    assert run.event_watermark == 0
    top = WorkflowEvent.objects.create(event="paid").pk
    second = build_run(workflow="contract", input=None, status=RunStatus.SCHEDULED)
    db.insert_run(second, watermark=True)
    given = build_run(workflow="contract", input={}, event_watermark=7)
    db.insert_run(given, watermark=False)
    assert (second.event_watermark, given.event_watermark, db.event_watermark()) == (
        top, 7, top)
    for inserted in (run, second, given):
        stored = WorkflowRun.objects.get(pk=inserted.pk)
        assert [getattr(stored, f.attname) for f in WorkflowRun._meta.concrete_fields] == [
            getattr(inserted, f.attname) for f in WorkflowRun._meta.concrete_fields]
    assert second.status == RunStatus.SCHEDULED and run.created_at is not None
    run.output = {"done": True}
    run.save()  # the instance knows it is stored: an UPDATE, not a second INSERT
    assert WorkflowRun.objects.get(pk=run.pk).output == {"done": True}


def test_hot_statements_give_rows_and_runs_as_the_orm_would(db: StoreBackend) -> None:
    run = new_run(output={"n": 1}, status=RunStatus.SUSPENDED)
    table = WorkflowRun._meta.db_table
    assert db.fetchall(f"SELECT workflow, status FROM {table} WHERE workflow = %s",
                       ["contract"]) == [("contract", RunStatus.SUSPENDED)]
    [moved] = db.runs(f"UPDATE {table} SET status = %s WHERE workflow = %s "
                      "RETURNING *", [RunStatus.RUNNING, "contract"])
    assert isinstance(moved, WorkflowRun)
    assert (moved.pk, moved.status, moved.output) == (run.pk, RunStatus.RUNNING, {"n": 1})
    assert moved.created_at == run.created_at
    assert db.runs(f"UPDATE {table} SET status = %s WHERE workflow = %s "
                   "RETURNING *", [RunStatus.RUNNING, "none"]) == []


def test_a_checkpoint_under_a_lost_lease_inserts_nothing(db: StoreBackend) -> None:
    run = new_run(lease_owner="b", lease_expires_at=now())
    done = outcome(new_step(run, "done", status=StepStatus.RUNNING, attempt_count=1), "r")
    t = now()
    assert db.checkpoint([done], unsaved_step(run, "next"), t,
                         Lease(run.pk, "a", t + timedelta(seconds=30))) is None
    assert not WorkflowStep.objects.filter(run=run, step_name="next").exists()
    assert_written(done[0], "r")  # those steps did run


def test_unsaved_rows_equal_the_models_own_and_save_the_same() -> None:
    run = new_run()
    fields = {"run_id": run.pk, "step_name": "s", "rpc_name": "fn", "status": StepStatus.RUNNING}
    fast, slow = unsaved(WorkflowStep, **fields), WorkflowStep(**fields)
    names = [f.attname for f in WorkflowStep._meta.concrete_fields]
    assert [getattr(fast, n) for n in names] == [getattr(slow, n) for n in names]
    assert (fast._state.adding, fast._state.db) == (True, None)
    attempt = new_attempt(fast, 1, now())
    fast.save(force_insert=True)
    attempt.save(force_insert=True)  # its step id comes from the step saved since
    assert StepAttempt.objects.get(pk=attempt.pk).step_id == fast.pk
    assert attempt.step is fast


# --- the run's end --------------------------------------------------------------------------


def test_a_run_finishes_once_and_only_under_its_lease(db: StoreBackend) -> None:
    run = new_run(lease_owner="a", lease_expires_at=now(), state={"k": [1, "x"]})
    done = outcome(new_step(run, "done", status=StepStatus.RUNNING, attempt_count=1), 7)
    t = now()
    changes = {"status": RunStatus.COMPLETED, "output": {"ok": True}, "error": None,
               "updated_at": t, "finished_at": t, "lease_owner": "", "lease_expires_at": None}
    assert db.finish_run([], run.pk, "b", changes) == (False, None)
    # The state as the statement left it comes back with the move.
    assert db.finish_run([done], run.pk, "a", changes) == (True, {"k": [1, "x"]})
    assert not db.finish_run([], run.pk, None, changes).moved  # no longer running
    run.refresh_from_db()
    assert (run.status, run.output, run.lease_owner) == (RunStatus.COMPLETED, {"ok": True}, "")
    assert_written(done[0], 7)


def test_state_keys_merge_without_clobbering(db: StoreBackend) -> None:
    run = new_run(state={"kept": 1})
    db.merge_state_key(run.pk, "a", '{"deep": [1, 2]}', now())
    db.merge_state_key(run.pk, "b.c", '"dotted"', now())
    db.merge_state_key(run.pk, "a", "2", now())
    assert WorkflowRun.objects.get(pk=run.pk).state == {"kept": 1, "a": 2, "b.c": "dotted"}


# --- queued steps ---------------------------------------------------------------------------


def test_a_step_is_claimed_once(db: StoreBackend) -> None:
    run = new_run()
    step = new_step(run, "q", status=StepStatus.SCHEDULED)
    t = now()
    claimed = db.claim_step(step.pk, t, t + timedelta(seconds=30), t)
    assert claimed is not None and claimed[1] == 1
    assert db.claim_step(step.pk, t, t + timedelta(seconds=30), t) is None
    step.refresh_from_db()
    assert (step.status, step.attempt_count) == (StepStatus.RUNNING, 1)
    assert step.lease_expires_at == t + timedelta(seconds=30)
    attempt = StepAttempt.objects.get(pk=claimed[0])
    assert (attempt.step_id, attempt.attempt, attempt.status) == (
        step.pk, 1, StepStatus.RUNNING)


def test_a_step_is_not_claimed_before_it_is_due_or_once_done(db: StoreBackend) -> None:
    run = new_run()
    t = now()
    later = new_step(run, "later", status=StepStatus.PENDING, wake_at=t + timedelta(seconds=5))
    done = new_step(run, "done", status=StepStatus.SUCCEEDED)
    assert db.claim_step(later.pk, t, t + timedelta(seconds=30), None) is None
    assert db.claim_step(done.pk, t, t + timedelta(seconds=30), None) is None
    due = t + timedelta(seconds=5)
    assert db.claim_step(later.pk, due, due + timedelta(seconds=30), None) == (
        StepAttempt.objects.get(step=later).pk, 1)


def test_a_claim_by_name_is_one_statement_where_the_database_can(db: StoreBackend) -> None:
    run = new_run()
    new_step(run, "q", status=StepStatus.SCHEDULED)
    t = now()
    claimed = db.claim_named_step(run.pk, "q", "fn", t, t + timedelta(seconds=30))
    if type(db) is not PostgresBackend:
        assert claimed is None  # the caller looks, then claims by id
        return
    assert claimed is not None
    attempt = StepAttempt.objects.get(step__run=run)
    assert (claimed.step.status, claimed.step.attempt_count, claimed.attempt,
            claimed.attempt_id, claimed.owner_id) == (StepStatus.RUNNING, 1, 1, attempt.pk, None)
    assert db.claim_named_step(run.pk, "q", "fn", t, t + timedelta(seconds=30)) is None
    other = new_run(status=RunStatus.CANCELLED)
    new_step(other, "q", status=StepStatus.SCHEDULED)
    assert db.claim_named_step(other.pk, "q", "fn", t, t + timedelta(seconds=30)) is None


def claimed_step(db: StoreBackend, run: WorkflowRun, name: str) -> tuple[WorkflowStep, int]:
    step = new_step(run, name, status=StepStatus.SCHEDULED)
    t = now()
    claimed = db.claim_step(step.pk, t, t + timedelta(seconds=30), None)
    assert claimed is not None
    return step, claimed[1]


def test_a_success_is_recorded_only_for_the_current_attempt(db: StoreBackend) -> None:
    run = new_run()
    step, attempt = claimed_step(db, run, "q")
    assert not db.record_success(step.pk, attempt + 1, "late", now())  # not current
    assert db.record_success(step.pk, attempt, {"r": 1}, now())
    assert not db.record_success(step.pk, attempt, "again", now())  # no longer running
    assert_written(step, {"r": 1})


def test_a_success_leases_the_run_for_the_last_finisher_only(db: StoreBackend) -> None:
    run = new_run()
    first, first_attempt = claimed_step(db, run, "a")
    last, last_attempt = claimed_step(db, run, "b")
    t, until = now(), now() + timedelta(seconds=30)
    recorded, leased = db.record_success_and_lease(first.pk, first_attempt, 1, t, run.pk,
                                                   "w1", until)
    assert recorded and leased is None  # "b" is still in flight
    recorded, leased = db.record_success_and_lease(last.pk, last_attempt, 2, t, run.pk,
                                                   "w2", until)
    assert recorded
    assert_written(first, 1)
    assert_written(last, 2)
    if leased is None:  # this database leases in a second step: the caller's
        assert type(db) is not PostgresBackend
        return
    assert (leased.run.pk, leased.run.lease_owner) == (run.pk, "w2")
    assert leased.steps is not None
    assert {name: step.status for name, step in leased.steps.items()} == {
        "a": StepStatus.SUCCEEDED, "b": StepStatus.SUCCEEDED}
    assert db.record_success_and_lease(last.pk, last_attempt, 2, t, run.pk, "w3", until) == (
        False, None)


def test_every_write_of_a_success_follows_the_one_rule(db: StoreBackend) -> None:
    """``step_succeeded_fields`` is the rule of a step's success: each write of one (behind,
    at a checkpoint, at the run's end, a queued step's guarded one, with the run's lease)
    leaves the step row with exactly its fields (a lease cleared, no error)."""
    run = new_run(lease_owner="a", lease_expires_at=now() + timedelta(seconds=30))
    t = now()

    def assert_rule(step: WorkflowStep, result: Any, at: datetime | None) -> None:
        step.refresh_from_db()
        for name, value in step_succeeded_fields(result, at).items():
            assert getattr(step, name) == value, name

    def running(name: str) -> WorkflowStep:
        return new_step(run, name, status=StepStatus.RUNNING, attempt_count=1,
                        error={"message": "earlier"}, lease_expires_at=t + timedelta(seconds=9))

    behind = outcome(running("behind"), {"r": 1})
    db.write_outcomes([behind])
    assert_rule(behind[0], {"r": 1}, behind[1].succeeded_at)
    checked = outcome(running("checkpoint"), [2])
    db.checkpoint([checked], unsaved_step(run, "next"), t, None)
    assert_rule(checked[0], [2], checked[1].succeeded_at)
    ended = outcome(running("end"), None)
    db.finish_run([ended], run.pk, None, {"status": RunStatus.COMPLETED})
    assert_rule(ended[0], None, ended[1].succeeded_at)
    other = new_run()
    queued, attempt = claimed_step(db, other, "queued")
    assert db.record_success(queued.pk, attempt, "q", t)
    assert_rule(queued, "q", t)
    leasing, attempt = claimed_step(db, other, "leasing")
    assert db.record_success_and_lease(leasing.pk, attempt, 5, t, other.pk, "w",
                                       t + timedelta(seconds=30))[0]
    assert_rule(leasing, 5, t)


def test_the_raw_sql_of_the_rule_is_rendered_from_it() -> None:
    from pikku_workflows.engine.store.backends.sql import step_succeeded_sql

    assert step_succeeded_sql("%s::jsonb", "%s") == (
        "status = 'succeeded', result = %s::jsonb, error = NULL, updated_at = %s, "
        "lease_expires_at = NULL")


# --- reads --------------------------------------------------------------------------------


def test_row_estimates_come_from_the_database_that_has_them(db: StoreBackend) -> None:
    new_run()
    estimate = db.estimated_count(WorkflowRun.objects.filter(status=RunStatus.RUNNING))
    if type(db) is PostgresBackend:
        assert isinstance(estimate, int)
        assert db.estimated_count(WorkflowRun.objects.none()) == 0
    else:
        assert estimate is None


def test_inserting_steps_unless_present_skips_the_ones_another_process_inserted(
        db: StoreBackend) -> None:
    """The contract of ``insert_steps_unless_present`` (a pass's deferred queued steps):
    each new step is inserted with the given time and gets its id; one whose key another
    process inserted meanwhile is skipped (id None), its row left as that process wrote
    it, and the others still go in."""
    run = new_run()
    theirs = new_step(run, "taken", status=StepStatus.SCHEDULED)
    at = now() - timedelta(minutes=3)  # the engine clock's time, not the database's
    steps = [unsaved_step(run, name, status=StepStatus.SCHEDULED)
             for name in ("first", "taken", "last")]
    db.insert_steps_unless_present(steps, at)
    assert [step.pk is not None for step in steps] == [True, False, True]
    rows = {s.step_name: s for s in WorkflowStep.objects.filter(run=run)}
    assert set(rows) == {"first", "taken", "last"}
    assert rows["taken"].pk == theirs.pk and rows["taken"].created_at == theirs.created_at
    for name in ("first", "last"):
        assert rows[name].created_at == rows[name].updated_at == at
        assert (rows[name].status, rows[name].data) == (StepStatus.SCHEDULED, {"n": 1})


@pytest.mark.parametrize(("model", "columns"), [
    (WorkflowStep, "STEP_COLUMNS"), (StepAttempt, "ATTEMPT_COLUMNS")])
def test_the_raw_inserts_name_every_column_the_orm_would_not_leave_null(model, columns):
    """The SQL backends insert steps and attempts with their own column lists: a column
    they leave out gets NULL or its database default, so it must be one the ORM would
    give the same (a new column with another default must be added to the list, or fail
    here)."""
    from django.db.models import NOT_PROVIDED

    from pikku_workflows.engine.store.backends import sql

    def omitted_as_the_orm_would(field):
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            return False
        if field.db_default is not NOT_PROVIDED:  # the database fills it in
            return getattr(field.db_default, "value", field.db_default) == field.default
        return field.null and field.default in (None, NOT_PROVIDED)

    named = set(getattr(sql, columns))
    fields = {f.column: f for f in model._meta.concrete_fields if not f.primary_key}
    assert named <= set(fields), named - set(fields)
    wrong = [column for column, f in fields.items()
             if column not in named and not omitted_as_the_orm_would(f)]
    assert not wrong, f"{model.__name__}: {wrong} left out of sql.{columns}"
