"""Shared fixtures: a clean step-call ledger and audit log per test."""

from __future__ import annotations

import os

import pytest
from django.test import override_settings

from tests.testapp.workflows import AUDIT_LOG, CALLS


@pytest.fixture(autouse=True)
def _clean_ledgers():
    CALLS.clear()
    AUDIT_LOG.clear()
    yield
    CALLS.clear()
    AUDIT_LOG.clear()


@pytest.fixture
def rq_executor():
    """The rq executor on a real Redis (the db of REDIS_URL, flushed), with no worker:
    tests run its jobs in their own process with ``pikku_workflows.testing.drain_queues``
    (use ``transactional_db``: jobs are sent on commit). Queued steps always go through
    Redis (no eager in-pass runs), so that their queue wait is real."""
    import django_rq
    import redis

    try:
        conn = django_rq.get_connection("default")
        conn.ping()
    except redis.RedisError as exc:
        if os.environ.get("PIKKU_REQUIRE_SERVICES") == "1":
            pytest.fail(f"Redis is not reachable: {exc}")
        pytest.skip(f"Redis is not reachable: {exc}")
    conn.flushdb()
    with override_settings(PIKKU_WORKFLOWS={"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0,
                                            "EAGER_QUEUED_STEPS": False}):
        yield
    conn.flushdb()
