"""Real PostgreSQL, real Redis and real ``pikku_worker`` subprocesses.

These tests are marked ``postgres_only``: ``make test`` runs them in its PostgreSQL
pass. Without PostgreSQL or Redis they skip, unless ``PIKKU_REQUIRE_SERVICES=1``
(CI), where a missing service is an error. Their fixtures (``redis_conn``,
``rq_settings``, ``workers``) are in ``tests/conftest.py``, helpers in ``tests/services.py``.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.postgres_only)
