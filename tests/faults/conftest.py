"""Fault injection on real PostgreSQL, Redis and ``pikku_worker`` subprocesses.

Marked ``postgres_only``; the fixtures are in ``tests/conftest.py``, the chaos scenario in
``chaos.py`` and the workflows with their ledger in ``workflows.py`` and ``models.py``.
"""

from __future__ import annotations

from tests.services import mark_postgres_only


def pytest_collection_modifyitems(items):
    mark_postgres_only(items, "faults")
