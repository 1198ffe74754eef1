"""Test settings: SQLite by default; PostgreSQL with PIKKU_TEST_DB=postgres or DATABASE_URL."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import urlparse

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
# The test client's host, and the real servers some tests start (tests/services.py).
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
# PIKKU_TEST_CACHE=database: a cache the server processes of a test share (the stream cap
# across workers); otherwise Django's default, per process.
if os.environ.get("PIKKU_TEST_CACHE") == "database":
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                          "LOCATION": "pikku_test_cache"}}
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
# Test users sign in by the hundred: a fast hasher (never in production).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_rq",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "pikku_workflows",
    "tests.testapp",
    "tests.faults",
    "demo_project.shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def database_from_env() -> dict:
    """The test database: DATABASE_URL, else PIKKU_TEST_DB=postgres|sqlite (default sqlite)."""
    url = os.environ.get("DATABASE_URL")
    if not url and os.environ.get("PIKKU_TEST_DB") == "postgres":
        url = "postgres://root@127.0.0.1:5432/pikku"
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(BASE_DIR / "pikku-test.sqlite3"),
            # As docs/deploying.md recommends (system check pikku_workflows.W001).
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20},
            "TEST": {"NAME": str(BASE_DIR / "pikku-test-db.sqlite3")},
        }
    parsed = urlparse(url)
    name = parsed.path.lstrip("/") or "pikku"
    # One test database per checkout, so two clones can run their suites side by side.
    checkout = hashlib.sha1(str(BASE_DIR).encode()).hexdigest()[:8]
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": parsed.username or "root",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.hostname or "127.0.0.1",
        "PORT": str(parsed.port or 5432),
        "TEST": {"NAME": f"test_{name}_{checkout}"},
    }


DATABASES = {
    "default": database_from_env(),
    # Where the DatabaseMirror tests copy rows to.
    "pikku_mirror": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(BASE_DIR / "pikku-mirror.sqlite3"),
        "TEST": {"NAME": str(BASE_DIR / "pikku-mirror-test.sqlite3")},
    },
}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
RQ_QUEUES = {
    "default": {"URL": REDIS_URL},
    # A Redis server of their own, which the fault tests stop and restart empty.
    "faults": {"URL": os.environ.get("PIKKU_FAULTS_REDIS_URL", "redis://127.0.0.1:6391/0")},
    # Nothing listens on port 1: the tests of enqueue failures use this alias.
    "unreachable": {"URL": "redis://127.0.0.1:1/0", "SOCKET_CONNECT_TIMEOUT": 0.5},
}

REST_FRAMEWORK = {
    # Services send "Authorization: Token <key>" (one indexed lookup, no password hash);
    # first in the list, so an unauthenticated call gets 401 with WWW-Authenticate.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

#: The named step limits the test workflows hold (tests/unit/workflows_step_limits.py).
TEST_LIMITS = {"test_api": {"concurrency": 1}, "test_rate": {"rate": "2/min"},
               "fault_api": {"concurrency": 3}, "fault_rate": {"rate": "20/s"},
               # The demo's (demo_project/settings.py), whose workflows the tests run.
               "email": {"rate": "10/s"}}
PIKKU_WORKFLOWS = {"DEFAULT_RETRY_DELAY": 0, "LIMITS": TEST_LIMITS}
# Worker subprocesses of the integration tests get the test's settings through this.
if os.environ.get("PIKKU_WORKFLOWS_JSON"):
    import json

    PIKKU_WORKFLOWS = {"LIMITS": TEST_LIMITS, **json.loads(os.environ["PIKKU_WORKFLOWS_JSON"])}
# Worker subprocesses of the tracing tests write their spans to this file (tests/spans.py).
if os.environ.get("PIKKU_TEST_SPAN_FILE"):
    from tests.spans import export_to_file

    export_to_file(os.environ["PIKKU_TEST_SPAN_FILE"])
if os.environ.get("PIKKU_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["PIKKU_TEST_DB_NAME"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "loggers": {"pikku_workflows": {"handlers": ["null"], "propagate": True}},
}
