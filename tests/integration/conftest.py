"""Real PostgreSQL, real Redis and real ``pikku_worker`` subprocesses (or the rq
executor's jobs drained in the test's process). The workflows of these tests are in
``workflows_rq.py`` (and ``tests/testapp/shared.py``), registered in the workers too.

These tests are marked ``postgres_only``: ``make test`` runs them in its PostgreSQL
pass. Without PostgreSQL or Redis they skip, unless ``PIKKU_REQUIRE_SERVICES=1``
(CI), where a missing service is an error. Their fixtures (``redis_conn``,
``rq_settings``, ``workers``) are in ``tests/conftest.py``, helpers in ``tests/services.py``.
"""

from __future__ import annotations

from tests.services import mark_postgres_only


def pytest_collection_modifyitems(items):
    mark_postgres_only(items, "integration")
