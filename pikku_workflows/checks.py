"""Django system checks: what pikku_workflows needs of the project's databases."""

from __future__ import annotations

import sqlite3
from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.db import DEFAULT_DB_ALIAS, connections

#: The engine's SQLite statements use ``UPDATE ... RETURNING`` (SQLite 3.35).
SQLITE_MIN = (3, 35, 0)


@register()
def check_sqlite_version(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An error when the runs' database (``default``) is SQLite older than the engine needs.

    Django 5.2 accepts SQLite 3.31; the engine needs 3.35. Checked here (``manage.py
    check``, ``runserver``, ``migrate``) rather than failing at a run's first lease.
    """
    if (connections[DEFAULT_DB_ALIAS].vendor != "sqlite"
            or sqlite3.sqlite_version_info >= SQLITE_MIN):
        return []
    found = ".".join(map(str, sqlite3.sqlite_version_info))
    return [Error(f"the default database is SQLite {found}; pikku_workflows needs SQLite "
                  f"{'.'.join(map(str, SQLITE_MIN))} or later (UPDATE ... RETURNING)",
                  hint="Use a Python built against a newer SQLite, or PostgreSQL.",
                  id="pikku_workflows.E001")]
