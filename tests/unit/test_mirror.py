"""The MIRROR: every committed row reaches it; a broken mirror changes nothing."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows import mirror
from pikku_workflows.engine.versions import register_versions
from pikku_workflows.executors.worker import SweepThread
from pikku_workflows.models import (
    MirrorOutbox,
    StepAttempt,
    WorkflowRun,
    WorkflowStep,
    WorkflowVersion,
)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pikku_mirror"])

MIRROR_SETTINGS = {"MIRROR": "pikku_workflows.mirror.DatabaseMirror", "DEFAULT_RETRY_DELAY": 0}


@pytest.fixture(autouse=True)
def _mirror_up() -> Iterator[None]:
    """Each test starts with no outage seen (the outage state is per process)."""
    assert mirror.flush()
    mirror._outage.down = False
    yield
    assert mirror.flush()


@contextmanager
def mirror_database_down(tmp_path: Path) -> Iterator[None]:
    """The mirror's SQLite database is unreachable: its directory is gone."""
    alias = connections.settings["pikku_mirror"]
    assert connections["pikku_mirror"].settings_dict is alias  # the dict every thread uses
    name = alias["NAME"]
    alias["NAME"] = str(tmp_path / "removed" / "mirror.sqlite3")
    connections["pikku_mirror"].close()
    try:
        yield
    finally:
        assert mirror.flush()
        alias["NAME"] = name
        connections["pikku_mirror"].close()


def rows(using: str) -> dict[str, set[tuple[object, ...]]]:
    """Every run, step and attempt of a database, with the columns that change."""
    return {
        "runs": {(pk, status, json.dumps(output, sort_keys=True)) for pk, status, output
                 in WorkflowRun.objects.using(using).values_list("pk", "status", "output")},
        "steps": set(WorkflowStep.objects.using(using).values_list(
            "pk", "status", "attempt_count")),
        "attempts": set(StepAttempt.objects.using(using).values_list("pk", "status")),
        "versions": set(WorkflowVersion.objects.using(using).values_list("pk", "graph_hash")),
    }


def outage_logs(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """The mirror's warnings and infos."""
    records = [r for r in caplog.records if r.name == "pikku_workflows.mirror"]
    return ([r.getMessage() for r in records if r.levelno == logging.WARNING],
            [r.getMessage() for r in records if r.levelno == logging.INFO])


def run_through_an_outage(tmp_path: Path) -> list[WorkflowRun]:
    """Runs that start before the mirror stops, go on while it is down, and new ones."""
    before = pw.start_workflow("two_gates", {})
    assert mirror.flush()
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=before.pk).status == "suspended"
    with mirror_database_down(tmp_path):
        pw.resume_run(before.pk, "a")  # mid-run: the mirror stops between two gates
        pw.resume_run(before.pk, "b")
        during = [pw.start_workflow("sequential", {"x": x}) for x in range(5)]
        during.append(pw.start_workflow("retrying", {"fail_times": 1, "retries": 2}))
        register_versions()
    # Back up: what the outage missed is not there yet, but in the outbox.
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=before.pk).status == "suspended"
    assert not WorkflowRun.objects.using("pikku_mirror").filter(
        pk__in=[r.pk for r in during]).exists()
    assert MirrorOutbox.objects.exists()
    return [before, *during]


class BrokenMirror(mirror.Mirror):
    """A mirror that always fails (the run must not notice)."""

    calls = 0

    def write(self, kind, row):
        BrokenMirror.calls += 1
        raise ConnectionError("the mirror is down")


def test_database_mirror_copies_runs_steps_attempts_and_versions(settings, django_user_model):
    settings.PIKKU_WORKFLOWS = {"MIRROR": "pikku_workflows.mirror.DatabaseMirror",
                                "DEFAULT_RETRY_DELAY": 0}
    owner = django_user_model.objects.create_user("ada")
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2}, owner=owner)
    suspended = pw.start_workflow("two_gates", {})
    register_versions()
    assert mirror.flush()
    copy = WorkflowRun.objects.using("pikku_mirror").get(pk=run.pk)
    assert copy.status == "completed" and copy.output == {"ok": True, "attempt": 2}
    assert copy.owner_id is None  # the user lives in the primary database only
    step = WorkflowStep.objects.using("pikku_mirror").get(run_id=run.pk)
    assert step.attempt_count == 2 and step.status == "succeeded"
    attempts = StepAttempt.objects.using("pikku_mirror").filter(step__run_id=run.pk)
    assert sorted(attempts.values_list("status", flat=True)) == ["failed", "succeeded"]
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=suspended.pk).status == "suspended"
    assert WorkflowVersion.objects.using("pikku_mirror").count() == \
        WorkflowVersion.objects.count() > 0
    # Later writes follow: resuming updates the copy.
    pw.resume_run(suspended.pk, "a")
    pw.resume_run(suspended.pk, "b")
    assert mirror.flush()
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=suspended.pk).output == {
        "warehouse": "a", "courier": "b"}


def test_a_broken_mirror_changes_nothing(settings, caplog):
    settings.PIKKU_WORKFLOWS = {"MIRROR": "tests.unit.test_mirror.BrokenMirror",
                                "DEFAULT_RETRY_DELAY": 0}
    BrokenMirror.calls = 0
    with caplog.at_level(logging.INFO, logger="pikku_workflows.mirror"):
        runs = [pw.start_workflow("sequential", {"x": 1}) for _ in range(5)]
        assert mirror.flush()
    assert all(r.status == "completed" and r.output == {"total": 2, "doubled": 4}
               for r in runs)
    assert BrokenMirror.calls > 0
    warnings, infos = outage_logs(caplog)
    assert len(warnings) == 1 and "the mirror is unavailable" in warnings[0]
    assert not infos and "Traceback" not in "\n".join(warnings)
    assert WorkflowRun.objects.using("pikku_mirror").count() == 0


def test_rows_missed_while_the_mirror_database_is_down_reach_it_after_the_catch_up(
        settings, caplog, tmp_path, monkeypatch):
    settings.PIKKU_WORKFLOWS = MIRROR_SETTINGS
    monkeypatch.setattr(mirror, "RETRY_EVERY", 3600)  # only the command catches up here
    with caplog.at_level(logging.INFO, logger="pikku_workflows.mirror"):
        runs = run_through_an_outage(tmp_path)
        out = io.StringIO()
        call_command("pikku_mirror_sync", stdout=out)
    assert "runs and versions mirrored" in out.getvalue()
    assert rows("pikku_mirror") == rows("default")
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=runs[0].pk).output == {
        "warehouse": "a", "courier": "b"}
    assert not MirrorOutbox.objects.exists()
    warnings, infos = outage_logs(caplog)
    assert len(warnings) == 1 and "the mirror is unavailable" in warnings[0]
    assert len(infos) == 1 and "the mirror is back" in infos[0] and "caught up" in infos[0]


def test_the_forwarder_catches_up_by_itself_once_the_mirror_returns(
        settings, caplog, tmp_path, monkeypatch):
    settings.PIKKU_WORKFLOWS = MIRROR_SETTINGS
    monkeypatch.setattr(mirror, "RETRY_EVERY", 0.05)
    with caplog.at_level(logging.INFO, logger="pikku_workflows.mirror"):
        run_through_an_outage(tmp_path)
        deadline = time.monotonic() + 10
        # The outbox empties a moment before the forwarder says the mirror is back.
        while (MirrorOutbox.objects.exists() or not outage_logs(caplog)[1]) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
    assert rows("pikku_mirror") == rows("default")
    warnings, infos = outage_logs(caplog)
    assert len(warnings) == 1 and len(infos) == 1


def test_the_workers_timer_catches_up_what_waited_one_tick(settings, tmp_path, monkeypatch):
    settings.PIKKU_WORKFLOWS = MIRROR_SETTINGS
    monkeypatch.setattr(mirror, "RETRY_EVERY", 3600)
    run_through_an_outage(tmp_path)
    timer = SweepThread(interval=60)
    timer.catch_up_mirror()  # notes the outbox's head: its writers may still deliver
    assert MirrorOutbox.objects.exists()
    timer.catch_up_mirror()
    assert rows("pikku_mirror") == rows("default")
    assert not MirrorOutbox.objects.exists()


def test_the_sync_command_fails_while_the_mirror_is_down(settings, tmp_path, monkeypatch):
    settings.PIKKU_WORKFLOWS = MIRROR_SETTINGS
    monkeypatch.setattr(mirror, "RETRY_EVERY", 3600)
    with mirror_database_down(tmp_path):
        pw.start_workflow("sequential", {"x": 1})
        assert mirror.flush()
        with pytest.raises(CommandError, match="the mirror is unavailable"):
            call_command("pikku_mirror_sync")
        assert MirrorOutbox.objects.exists()
    settings.PIKKU_WORKFLOWS = {}
    with pytest.raises(CommandError, match="MIRROR"):
        call_command("pikku_mirror_sync")


def test_no_mirror_configured_sends_nothing(settings):
    settings.PIKKU_WORKFLOWS = {"DEFAULT_RETRY_DELAY": 0}
    with CaptureQueriesContext(connection) as queries:
        pw.start_workflow("sequential", {"x": 1})
    assert mirror.flush()
    assert WorkflowRun.objects.using("pikku_mirror").count() == 0
    assert not any(MirrorOutbox._meta.db_table in q["sql"] for q in queries)


def test_at_most_one_outbox_entry_per_write_transaction(settings):
    settings.PIKKU_WORKFLOWS = {"MIRROR": "tests.unit.test_mirror.BrokenMirror",
                                "DEFAULT_RETRY_DELAY": 0}
    pw.start_workflow("sequential", {"x": 1})  # registers the version first
    with CaptureQueriesContext(connection) as queries:
        pw.start_workflow("sequential", {"x": 1})
    transactions, entries, open_ = 0, 0, False
    # The backends log a batch as "N times: <sql>"; a statement's own text may hold ": ".
    for sql in (re.sub(r"^\d+ times: ", "", q["sql"]).upper() for q in queries):
        if MirrorOutbox._meta.db_table.upper() in sql:
            entries += 1
        elif sql.startswith("BEGIN"):
            open_ = True
        elif sql.startswith("COMMIT"):
            open_, transactions = False, transactions + 1
        elif sql.startswith(("INSERT", "UPDATE", "DELETE", "WITH")) and not open_:
            transactions += 1  # autocommit
    assert 0 < entries <= transactions


class Crash(BaseException):
    """The process dies here: nothing after it runs, no handler catches it."""


@contextmanager
def crash_at_outbox_write(number: int) -> Iterator[list[int]]:
    """Kill the "process" at its ``number``-th outbox insert; yields the insert count."""
    table = MirrorOutbox._meta.db_table
    seen = [0]

    def execute(run, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT") and table in sql:
            seen[0] += 1
            if seen[0] == number:
                raise Crash(sql)
        return run(sql, params, many, context)

    with connection.execute_wrapper(execute):
        yield seen


def test_a_crash_at_any_outbox_write_loses_no_committed_change(settings, monkeypatch):
    """Wherever a process dies around an outbox write (after a row was committed in
    autocommit, inside a transaction), the catch-up leaves the mirror equal to the
    primary: no change is committed without its entry."""
    settings.PIKKU_WORKFLOWS = MIRROR_SETTINGS
    monkeypatch.setattr(mirror, "RETRY_EVERY", 3600)
    pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})  # versions registered
    number = 0
    while True:
        number += 1
        with crash_at_outbox_write(number) as seen, suppress(Crash):
            pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})
        assert mirror.flush()
        mirror.sync()  # what a restarted worker's timer or pikku_mirror_sync does
        assert rows("pikku_mirror") == rows("default"), f"crash at outbox write {number}"
        if seen[0] < number:
            break  # the run wrote fewer entries: every point was tried
    assert number > 2
