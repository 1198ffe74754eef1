"""Fault injection on real PostgreSQL, Redis and ``pikku_worker`` subprocesses."""

from __future__ import annotations

from tests.services import mark_postgres_only, redis_conn, rq_settings, workers

__all__ = ["redis_conn", "rq_settings", "workers"]


def pytest_collection_modifyitems(items):
    mark_postgres_only(items, "faults")
