"""Django system checks: what pikku_workflows needs of the project's databases and settings."""

from __future__ import annotations

import difflib
import re
import sqlite3
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DEFAULT_DB_ALIAS, connections, router
from django.urls import URLResolver, get_resolver

from .conf import DEFAULTS, did_you_mean, limit_errors, validate_setting
from .exceptions import WorkflowConfigurationError
from .registry import registry

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
        if name == "LIMITS":
            continue  # check_step_limits: one error per entry
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


@register()
def check_database_routing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``E014``: ``DATABASE_ROUTERS`` send this app's rows to a database other than
    ``default``.

    The engine writes runs, steps and attempts with statements of its own on the
    ``default`` connection (one commit per step); routed elsewhere, its reads (the ORM's,
    routed) and writes (not) would split between two databases.
    """
    from .models import MirrorOutbox, StepAttempt, WorkflowRun, WorkflowStep

    errors: list[CheckMessage] = []
    for model in (WorkflowRun, WorkflowStep, StepAttempt, MirrorOutbox):
        for use, alias in (("reads", router.db_for_read(model)),
                           ("writes", router.db_for_write(model))):
            if alias not in (None, DEFAULT_DB_ALIAS):
                errors.append(Error(
                    f"DATABASE_ROUTERS route {use} of {model._meta.label} to {alias!r}; "
                    "pikku_workflows keeps its rows in the 'default' database",
                    hint="Let your router return None for the pikku_workflows app (a "
                    "MIRROR copies the rows elsewhere: docs/deploying.md).",
                    id="pikku_workflows.E014"))
    return errors


@register()
def check_step_limits(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Errors for named step limits that would not limit what they should.

    ``E015``: a function names a limit ``PIKKU_WORKFLOWS["LIMITS"]`` does not declare (it
    would limit nothing); ``E016``: a ``LIMITS`` entry that is invalid (a rate that does
    not parse, a concurrency below 1, an unknown key).
    """
    raw = getattr(settings, "PIKKU_WORKFLOWS", None) or {}
    if not isinstance(raw, dict):
        return []  # E013
    declared = raw.get("LIMITS", {})
    errors: list[CheckMessage] = []
    if not isinstance(declared, dict):
        return [Error("PIKKU_WORKFLOWS['LIMITS'] must be a dict of named limits",
                      hint="See docs/step-limits.md.", id="pikku_workflows.E016")]
    for name, spec in declared.items():
        errors.extend(Error(message, hint="See docs/step-limits.md.",
                            id="pikku_workflows.E016")
                      for message in limit_errors(name, spec))
    for definition in registry.functions():
        for name in definition.limits:
            if name not in declared:
                hint = difflib.get_close_matches(name, list(declared), n=1)
                errors.append(Error(
                    f"function {definition.name!r} names the limit {name!r}, which "
                    "PIKKU_WORKFLOWS['LIMITS'] does not declare (it would limit nothing)",
                    hint=f"Did you mean {hint[0]!r}?" if hint else
                    f"Declare it: PIKKU_WORKFLOWS['LIMITS'][{name!r}] = "
                    "{'concurrency': ..., 'rate': ...}.",
                    id="pikku_workflows.E015"))
    return errors


#: What a project sets for WAL, in the warning's hint (Django 5.1+ runs ``init_command``
#: on each new SQLite connection).
WAL_OPTIONS = '"OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"}'
_WAL_PRAGMA = re.compile(r"journal_mode\s*=\s*['\"]?wal\b", re.IGNORECASE)
# An SQLite file's header: bytes 18 and 19 (write and read format versions) are 2 in WAL
# mode, which persists in the file once set, and 1 with a rollback journal.
_WAL_HEADER = b"\x02\x02"


def _in_wal_mode(settings_dict: dict[str, Any]) -> bool:
    """Whether connections to this SQLite database use WAL: set by ``init_command``, or
    already a property of its file (read from the header: no connection is opened, so
    that ``check`` never creates a database file)."""
    if _WAL_PRAGMA.search(str((settings_dict.get("OPTIONS") or {}).get("init_command", ""))):
        return True
    try:
        with open(settings_dict["NAME"], "rb") as file:
            return file.read(20)[18:20] == _WAL_HEADER
    except (OSError, TypeError, KeyError):
        return False


@register()
def check_sqlite_wal(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A warning when the runs' database (``default``) is SQLite with a rollback journal.

    Every step commits; with Django's default journal a step costs about three times what
    it costs in WAL mode (B1 in BENCHMARKS.md, docs/deploying.md), and readers block
    the writer. In-memory databases (no WAL there) are not reported.
    """
    if connections[DEFAULT_DB_ALIAS].vendor != "sqlite":
        return []
    return sqlite_wal_warnings(connections[DEFAULT_DB_ALIAS].settings_dict)


def sqlite_wal_warnings(settings_dict: dict[str, Any]) -> list[CheckMessage]:
    """The ``W001`` warning for an SQLite database's settings, if it is not in WAL mode.

    Args:
        settings_dict: An SQLite entry of ``DATABASES``.

    Returns:
        One warning, or none when the database uses WAL or lives in memory.
    """
    name = str(settings_dict.get("NAME") or "")
    if name in ("", ":memory:") or "mode=memory" in name or _in_wal_mode(settings_dict):
        return []
    return [Warning(
        "the default database is SQLite with a rollback journal: each workflow step "
        "costs several times what it costs in WAL mode, and readers block the writer",
        hint=f"Set journal_mode=WAL in DATABASES['default']: {WAL_OPTIONS} "
             "(see docs/deploying.md).",
        id="pikku_workflows.W001")]


#: The REST API's URLconf, and the apps it needs installed (the `rest` extra).
API_URLCONF = "pikku_workflows.api.urls"
REST_APPS = ("rest_framework", "django_filters")


def _includes(patterns: list[Any], urlconf: str) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            module = pattern.urlconf_name
            name = module if isinstance(module, str) else getattr(module, "__name__", "")
            if name == urlconf or _includes(pattern.url_patterns, urlconf):
                return True
    return False


@register()
def check_rest_api(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``W002``: the project's URLconf includes the REST API (``pikku_workflows.api.urls``)
    while ``INSTALLED_APPS`` lacks ``rest_framework`` or ``django_filters``.

    The rest of the app (engine, console, commands, workers) needs neither; a URLconf that
    does not import is Django's own check's to report.
    """
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # Django's URL check (urls.E...) reports what is wrong with it
        return []
    if not _includes(patterns, API_URLCONF):
        return []
    missing = [app for app in REST_APPS if not apps.is_installed(app)]
    if not missing:
        return []
    return [Warning(
        f"the URLconf includes the REST API ({API_URLCONF}) but INSTALLED_APPS lacks "
        + ", ".join(map(repr, missing)),
        hint="Add them to INSTALLED_APPS (the packages come with the `rest` extra: "
             "pip install 'pikku-workflows[rest]'), or leave the API's URLs out.",
        id="pikku_workflows.W002")]
