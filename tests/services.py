"""Real Redis and real ``pikku_worker`` subprocesses for the tests that need them.

Without PostgreSQL or Redis those tests skip, unless ``PIKKU_REQUIRE_SERVICES=1`` (CI),
where a missing service is an error. The fixtures (``redis_conn``, ``rq_settings``,
``workers``) are in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.processes import WorkerProcesses

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


class Workers(WorkerProcesses):
    """Starts and stops ``manage.py pikku_worker`` subprocesses against the test database."""

    stop_timeout = 10.0

    def __init__(self, settings: dict) -> None:
        super().__init__()
        self.settings = settings

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
        return self.spawn([sys.executable, str(ROOT / "manage.py"), "pikku_worker",
                           "--sweep-interval", "1", *extra], count, expect=expect, timeout=30)

    def run(self, *args: str, timeout: float = 60) -> str:
        """Run another manage.py command against the same database and Redis."""
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args], env=self.env(), cwd=ROOT,
            capture_output=True, text=True, timeout=timeout, check=True,
        ).stdout


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


class HTTPServer:
    """The test project (``tests.settings``, ``tests.urls``) served by a real server in a
    subprocess on a free port, against the test database: gunicorn (WSGI) or uvicorn
    (ASGI). The test's database rows must be committed (``transactional_db``)."""

    def __init__(self, kind: str, settings: dict | None = None, *, workers: int = 1,
                 extra_env: dict[str, str] | None = None) -> None:
        import socket
        import tempfile

        self.kind = kind
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            PIKKU_WORKFLOWS_JSON=json.dumps(settings or {"DEFAULT_RETRY_DELAY": 0}),
            PIKKU_TEST_DB_NAME=connection.settings_dict["NAME"],
            PYTHONPATH=str(ROOT),
            **(extra_env or {}),
        )
        address = f"127.0.0.1:{self.port}"
        if kind == "wsgi":
            argv = [sys.executable, "-m", "gunicorn", "--bind", address,
                    "--workers", str(workers), "--threads", "4", "--timeout", "60",
                    "--no-control-socket",
                    "django.core.wsgi:get_wsgi_application()"]
        elif kind == "asgi":
            argv = [sys.executable, "-m", "uvicorn", "--factory",
                    "django.core.asgi:get_asgi_application", "--host", "127.0.0.1",
                    "--port", str(self.port), "--workers", str(workers), "--no-access-log"]
        else:
            raise ValueError(kind)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(argv, env=env, cwd=ROOT, start_new_session=True,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_for(self._listening, timeout=30, interval=0.05)
        except AssertionError:
            self.close()
            raise RuntimeError(f"{kind} server did not start: {self.output()[-3000:]}"
                               ) from None

    def _listening(self) -> bool:
        import socket

        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.kind} server exited: {self.output()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def connection(self, timeout: float = 15):
        """A new ``http.client`` connection to the server."""
        import http.client

        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
