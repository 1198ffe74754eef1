"""Django settings of the benchmarks: PostgreSQL or SQLite (WAL), Redis db 14, the RQ executor.

Environment (all optional; the harness sets them for its subprocesses and workers):
``PIKKU_BENCH_DB`` (``postgres`` | ``sqlite`` | ``sqlite-rollback``: Django's default
rollback journal, B1 only), ``PIKKU_BENCH_POSTGRES_URL``,
``PIKKU_BENCH_SQLITE_PATH``, ``PIKKU_BENCH_REDIS_URL``, ``PIKKU_BENCH_CONN_MAX_AGE``
and ``PIKKU_BENCH_WORKFLOWS_JSON`` (merged into ``PIKKU_WORKFLOWS``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / ".data"
POSTGRES_URL = "postgres://root@127.0.0.1:5432/pikku_bench"
REDIS_URL = "redis://127.0.0.1:6379/14"

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_rq",
    "rest_framework",
    "pikku_workflows",
    "benchmarks.benchapp",
]


def _conn_max_age() -> int | None:
    # Persistent connections, as a production deployment would run its workers.
    raw = os.environ.get("PIKKU_BENCH_CONN_MAX_AGE", "600")
    return None if raw == "none" else int(raw)


def database_from_env() -> dict:
    """The database the benchmarks run on, from ``PIKKU_BENCH_DB`` and friends."""
    db = os.environ.get("PIKKU_BENCH_DB", "postgres")
    if db in ("sqlite", "sqlite-rollback"):
        # The journal mode persists in the file: each mode has a file of its own (the
        # harness's PIKKU_BENCH_SQLITE_PATH), and the pragma sets it either way.
        journal = "DELETE" if db == "sqlite-rollback" else "WAL"
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("PIKKU_BENCH_SQLITE_PATH",
                                   str(DATA_DIR / "pikku_bench.sqlite3")),
            "OPTIONS": {"init_command": f"PRAGMA journal_mode={journal};"},
            "CONN_MAX_AGE": _conn_max_age(),
        }
    url = urlparse(os.environ.get("PIKKU_BENCH_POSTGRES_URL", POSTGRES_URL))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.path.lstrip("/") or "pikku_bench",
        "USER": url.username or "root",
        "PASSWORD": url.password or "",
        "HOST": url.hostname or "127.0.0.1",
        "PORT": str(url.port or 5432),
        "CONN_MAX_AGE": _conn_max_age(),
    }


DATABASES = {"default": database_from_env()}
RQ_QUEUES = {"default": {"URL": os.environ.get("PIKKU_BENCH_REDIS_URL", REDIS_URL)}}
PIKKU_WORKFLOWS = {
    "EXECUTOR": "rq",
    "DEFAULT_RETRY_DELAY": 0,
    # B16's limits: wide enough never to make a step wait (their cost, not their waits).
    "LIMITS": {"bench_api": {"concurrency": 1000}, "bench_rate": {"rate": "1000000/min"}},
    **json.loads(os.environ.get("PIKKU_BENCH_WORKFLOWS_JSON", "{}")),
}
