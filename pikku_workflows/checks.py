"""Django system checks: what pikku_workflows needs of the project's databases and settings."""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.db import DEFAULT_DB_ALIAS, connections

from .conf import DEFAULTS, did_you_mean, validate_setting
from .exceptions import WorkflowConfigurationError

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


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Errors for a ``PIKKU_WORKFLOWS`` that would fail at run time, found at ``check``.

    ``E010``: an unknown key (a typo: the hint suggests the closest known one);
    ``E011``: a value the setting refuses (each key as the engine validates it on use);
    ``E012``: with ``EXECUTOR`` ``"rq"``, an ``RQ_CONNECTION`` alias not in ``RQ_QUEUES``;
    ``E013``: ``PIKKU_WORKFLOWS`` is not a dict.
    """
    raw = getattr(settings, "PIKKU_WORKFLOWS", None) or {}
    if not isinstance(raw, dict):
        return [Error(f"PIKKU_WORKFLOWS must be a dict, not {type(raw).__name__}",
                      id="pikku_workflows.E013")]
    errors: list[CheckMessage] = []
    for name in raw:
        if name not in DEFAULTS:
            hint = did_you_mean(name)
            errors.append(Error(
                f"unknown setting PIKKU_WORKFLOWS[{name!r}]",
                hint=(hint[0].upper() + hint[1:]) if hint else
                f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="pikku_workflows.E010"))
            continue
        try:
            validate_setting(name, raw[name])
        except (WorkflowConfigurationError, ImportError, ValueError, TypeError) as exc:
            errors.append(Error(
                f"PIKKU_WORKFLOWS[{name!r}] is invalid: {exc}",
                hint="See the settings reference (docs/settings.md).",
                id="pikku_workflows.E011"))
    if raw.get("EXECUTOR", DEFAULTS["EXECUTOR"]) == "rq":
        alias = raw.get("RQ_CONNECTION", DEFAULTS["RQ_CONNECTION"])
        queues = getattr(settings, "RQ_QUEUES", None) or {}
        if not isinstance(queues, dict) or alias not in queues:
            known = ", ".join(map(repr, queues)) if isinstance(queues, dict) else ""
            errors.append(Error(
                f"PIKKU_WORKFLOWS['EXECUTOR'] is 'rq' and its RQ_CONNECTION {alias!r} is "
                "not an alias of RQ_QUEUES",
                hint=(f"RQ_QUEUES has {known}; " if known else "RQ_QUEUES is empty; ")
                + f"add {alias!r} to it, or set RQ_CONNECTION to one of its aliases.",
                id="pikku_workflows.E012"))
    return errors
