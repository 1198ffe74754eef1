"""The console's worker banner against a real Redis. The banner without Redis is in
tests/unit/admin/test_console.py."""

from __future__ import annotations

import pytest


@pytest.mark.postgres_only
def test_the_worker_banner_goes_once_a_worker_beats(admin_client, settings):
    import django_rq
    from redis.exceptions import RedisError
    from rq import Worker

    from pikku_workflows.admin.workers import worker_banner
    from tests.services import unavailable

    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq"}
    redis = django_rq.get_connection("default")
    try:
        redis.ping()
    except RedisError as exc:
        unavailable(f"Redis is not reachable: {exc}")
    redis.flushdb()
    assert "No pikku_worker has been seen" in worker_banner()["message"]
    worker = Worker(["pikku-workflow-orchestrator"], connection=redis)
    worker.register_birth()
    worker.heartbeat()
    try:
        assert worker_banner() is None
    finally:
        worker.register_death()
        redis.flushdb()
