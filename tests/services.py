"""Fixtures for tests on real PostgreSQL, real Redis and real ``pikku_worker`` subprocesses.

The conftest of each folder of such tests (``integration``, ``faults``) imports them and
marks its tests ``postgres_only``: ``make test`` runs them in its PostgreSQL pass. Without
PostgreSQL or Redis they skip, unless ``PIKKU_REQUIRE_SERVICES=1`` (CI), where a missing
service is an error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "EXECUTOR": "rq",
    "DEFAULT_RETRY_DELAY": 0,
    "LEASE_TIMEOUT": "2s",
    "UNDISPATCHED_AFTER": "1s",
    "STALLED_AFTER": "3s",
}


def mark_postgres_only(items, folder: str) -> None:
    """Mark the tests under ``tests/<folder>`` as needing PostgreSQL."""
    for item in items:
        if f"/{folder}/" in str(item.fspath):
            item.add_marker(pytest.mark.postgres_only)


def unavailable(reason: str) -> None:
    if os.environ.get("PIKKU_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (PIKKU_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture
def redis_conn(settings):
    import django_rq
    import redis

    try:
        conn = django_rq.get_connection("default")
        conn.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis is not reachable: {exc}")
    conn.flushdb()
    yield conn
    conn.flushdb()


@pytest.fixture
def rq_settings(redis_conn, transactional_db):
    if connection.vendor != "postgresql":
        unavailable("integration tests need PostgreSQL")
    with override_settings(PIKKU_WORKFLOWS=SETTINGS):
        yield SETTINGS


class Workers:
    """Starts and stops ``manage.py pikku_worker`` subprocesses against the test database."""

    def __init__(self, settings: dict) -> None:
        self.settings = settings
        self.procs: list[subprocess.Popen] = []
        # The workers' stderr, shown when they fail; closed by the fixture.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115

    def env(self) -> dict:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            PIKKU_WORKFLOWS_JSON=json.dumps(self.settings),
            PIKKU_TEST_DB_NAME=connection.settings_dict["NAME"],
            PYTHONPATH=str(ROOT),
        )
        return env

    def start(self, count: int = 1, *extra: str, expect: int | None = None
              ) -> list[subprocess.Popen]:
        """Start ``count`` worker commands; wait until ``expect`` RQ workers (default
        ``count``) have registered."""
        from rq import Worker

        from pikku_workflows.executors.rq import connection as redis_connection

        before = len(Worker.all(connection=redis_connection()))
        started = []
        for _ in range(count):
            proc = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "pikku_worker",
                 "--sweep-interval", "1", *extra],
                env=self.env(), cwd=ROOT, start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=self.log,
            )
            self.procs.append(proc)
            started.append(proc)
        deadline = time.monotonic() + 20
        while len(Worker.all(connection=redis_connection())) < before + (expect or count):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start: {self.output()[-2000:]}")
            time.sleep(0.1)
        return started

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=10)

    def run(self, *args: str, timeout: float = 60) -> str:
        """Run another manage.py command against the same database and Redis."""
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args], env=self.env(), cwd=ROOT,
            capture_output=True, text=True, timeout=timeout, check=True,
        ).stdout

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


@pytest.fixture
def workers(rq_settings):
    pool = Workers(rq_settings)
    yield pool
    pool.stop_all()
    pool.log.close()
    # Worker registrations and scheduler locks die with Redis's flush in redis_conn.


def wait_for(predicate, timeout: float = 30, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
