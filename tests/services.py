"""Real Redis and real ``pikku_worker`` subprocesses for the tests that need them.

Without PostgreSQL or Redis those tests skip, unless ``PIKKU_REQUIRE_SERVICES=1`` (CI),
where a missing service is an error. The fixtures (``redis_conn``, ``rq_settings``,
``workers``) are in ``tests/conftest.py``.
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

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "EXECUTOR": "rq",
    "DEFAULT_RETRY_DELAY": 0,
    "LEASE_TIMEOUT": "2s",
    "UNDISPATCHED_AFTER": "1s",
    "STALLED_AFTER": "3s",
}


def unavailable(reason: str) -> None:
    """Skip for a missing service, or fail under ``PIKKU_REQUIRE_SERVICES=1``."""
    if os.environ.get("PIKKU_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (PIKKU_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


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
        groups = {proc.pid for proc in started}  # each command leads its process group

        def registered() -> int:
            # Counted by process group, not by total: killed workers' registrations
            # linger or get cleaned up meanwhile.
            return sum(1 for worker in Worker.all(connection=redis_connection())
                       if _process_group(worker.pid) in groups)

        try:
            wait_for(lambda: registered() >= (expect or count), timeout=30)
        except AssertionError:
            raise RuntimeError(f"workers did not start: {self.output()[-2000:]}") from None
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


def _process_group(pid: int | None) -> int | None:
    try:
        return os.getpgid(pid) if pid else None
    except ProcessLookupError:
        return None


def wait_for(predicate, timeout: float = 30, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def sweep_after(seconds: float) -> dict[str, int]:
    """``manage.py pikku_recover`` in the test's process, on a fake clock ``seconds`` ahead:
    what its sweep finds once that much time has passed (a lapsed ``LEASE_TIMEOUT``, work
    older than ``UNDISPATCHED_AFTER``), without waiting for it. Returns its counts."""
    import io
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from pikku_workflows.testing import fake_clock

    out = io.StringIO()
    with fake_clock(timezone.now() + timedelta(seconds=seconds)):
        call_command("pikku_recover", stdout=out)
    return json.loads(out.getvalue())


def mark_postgres_only(items, folder: str) -> None:
    """Mark the tests under ``tests/<folder>`` as needing PostgreSQL."""
    for item in items:
        if f"/{folder}/" in str(item.fspath):
            item.add_marker(pytest.mark.postgres_only)
