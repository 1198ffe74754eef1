"""Shared fixtures: a clean step-call ledger and audit log per test; API clients for the
owner of runs, another user, staff and anonymous; Redis, the RQ settings and
``pikku_worker`` subprocesses for the tests that need real services."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from tests.services import SETTINGS, Workers, unavailable
from tests.testapp.shared import AUDIT_LOG, CALLS

#: Where tests/urls.py mounts the REST API.
API = "/api/workflows/"


def runs_in_each_state(owner=None) -> dict:
    """One run per state the run routes and console actions apply to: ``failed``,
    ``gated`` (waiting for an approval), ``suspended`` and ``done``; then clears CALLS
    (from there on, a step function's call is the test's doing)."""
    import pikku_workflows as pw

    made = {
        "failed": pw.start_workflow("retrying", {"fail_times": 5, "retries": 0}, owner=owner),
        "gated": pw.start_workflow("needs_approval", {}, owner=owner),
        "suspended": pw.start_workflow("two_gates", {}, owner=owner),
        "done": pw.start_workflow("sequential", {"x": 1}, owner=owner),
    }
    CALLS.clear()
    return made


@pytest.fixture(autouse=True)
def _clean_ledgers():
    from django.core.cache import cache

    CALLS.clear()
    AUDIT_LOG.clear()
    # Stream slots (MAX_STREAMS_PER_USER) live in the cache, keyed by user ids that the
    # next test's users reuse.
    cache.clear()
    yield
    CALLS.clear()
    AUDIT_LOG.clear()


# --- API clients ---------------------------------------------------------------------------


#: What an operator holds: the view permission, every run action's, and sending events.
OPERATOR_PERMISSIONS = ("view_workflowrun", "delete_workflowrun", "resume_workflowrun",
                        "cancel_workflowrun", "retry_workflowrun", "approve_workflowrun",
                        "add_workflowevent")


@pytest.fixture
def fork_flags():
    """The fork tests' stand-ins for a deploy (``workflows_forks.FLAGS``), reset around a test."""
    from tests.unit.workflows_forks import FLAGS

    FLAGS.update(fixed=False, renamed=False)
    yield FLAGS
    FLAGS.update(fixed=False, renamed=False)


@pytest.fixture
def users(django_user_model):
    """``owner`` and ``other`` (no permissions), and ``staff``: an operator, staff holding
    ``OPERATOR_PERMISSIONS`` (staff status alone grants nothing)."""
    from django.contrib.auth.models import Permission

    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="pikku_workflows", codename__in=OPERATOR_PERMISSIONS))
    return {
        "owner": django_user_model.objects.create_user("owner", password="pw"),
        "other": django_user_model.objects.create_user("other", password="pw"),
        "staff": staff,
    }


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def owner(users):
    return client_for(users["owner"])


@pytest.fixture
def other(users):
    return client_for(users["other"])


@pytest.fixture
def staff(users):
    return client_for(users["staff"])


@pytest.fixture
def anonymous():
    return client_for()


# --- Redis, the RQ executor and workers (PostgreSQL only) ------------------------------------


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


@pytest.fixture
def workers(rq_settings):
    pool = Workers(rq_settings)
    yield pool
    pool.close()
    # Worker registrations and scheduler locks die with Redis's flush in redis_conn.


@pytest.fixture
def rq_executor(redis_conn):
    """The rq executor on a real Redis (the db of REDIS_URL, flushed), with no worker:
    tests run its jobs in their own process with ``pikku_workflows.testing.drain_queues``
    (use ``transactional_db``: jobs are sent on commit). Queued steps always go through
    Redis (no eager in-pass runs), so that their queue wait is real."""
    with override_settings(PIKKU_WORKFLOWS={"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0,
                                            "EAGER_QUEUED_STEPS": False}):
        yield
