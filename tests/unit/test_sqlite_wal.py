"""The system check that warns when the runs' SQLite database has a rollback journal."""

from __future__ import annotations

import sqlite3

import pytest
from django.core.checks import run_checks
from django.db import connection

from pikku_workflows import checks

WAL = {"init_command": "PRAGMA journal_mode=WAL;"}


def make_database(path, journal_mode: str) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA journal_mode={journal_mode}")
        conn.execute("CREATE TABLE t (x INTEGER)")
    conn.close()
    return str(path)


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_a_rollback_journal_is_warned_with_the_options_to_set(tmp_path):
    name = make_database(tmp_path / "rollback.sqlite3", "DELETE")
    [warning] = checks.sqlite_wal_warnings({"NAME": name, "OPTIONS": {}})
    assert warning.id == "pikku_workflows.W001"
    assert '"OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"}' in warning.hint
    # A file not created yet has no journal mode of its own: the settings decide.
    assert ids(checks.sqlite_wal_warnings({"NAME": str(tmp_path / "new.sqlite3")})) == [
        "pikku_workflows.W001"]


def test_wal_from_the_settings_or_from_the_file_passes(tmp_path):
    rollback = make_database(tmp_path / "rollback.sqlite3", "DELETE")
    assert checks.sqlite_wal_warnings({"NAME": rollback, "OPTIONS": WAL}) == []
    assert checks.sqlite_wal_warnings(
        {"NAME": rollback, "OPTIONS": {"init_command": "pragma journal_mode = 'wal'"}}) == []
    # WAL persists in the file: set once (by hand, or by another process), it holds.
    wal = make_database(tmp_path / "wal.sqlite3", "WAL")
    assert checks.sqlite_wal_warnings({"NAME": wal, "OPTIONS": {}}) == []
    assert checks.sqlite_wal_warnings({"NAME": ":memory:"}) == []
    assert checks.sqlite_wal_warnings({"NAME": "file:x?mode=memory&cache=shared"}) == []


def test_the_check_reads_the_default_database_without_opening_it(tmp_path):
    assert not (tmp_path / "absent.sqlite3").exists()
    checks.sqlite_wal_warnings({"NAME": str(tmp_path / "absent.sqlite3")})
    assert not (tmp_path / "absent.sqlite3").exists()


@pytest.mark.django_db
def test_the_test_database_runs_in_wal_mode():
    """The tests' SQLite settings use WAL, as the demo's do: no warning, and the
    connection's journal really is the WAL."""
    assert "pikku_workflows.W001" not in ids(run_checks())
    if connection.vendor != "sqlite":
        assert checks.check_sqlite_wal() == []
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
