"""The ``PIKKU_WORKFLOWS`` settings, read lazily and validated.

Usage in a project's settings::

    PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "DEFAULT_RETRIES": 3}

Code reads ``pikku_settings.DEFAULT_RETRIES``; values are looked up on first use and
re-read whenever Django's ``setting_changed`` fires (so ``override_settings`` works).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .durations import parse_duration, parse_rate
from .exceptions import WorkflowConfigurationError

DEFAULTS: dict[str, Any] = {
    # "inline": runs execute in the caller's process; "rq": on pikku_worker processes.
    "EXECUTOR": "inline",
    # The RQ_QUEUES alias whose Redis connection the RQ executor uses.
    "RQ_CONNECTION": "default",
    "ORCHESTRATOR_QUEUE": "pikku-workflow-orchestrator",
    "STEP_WORKER_QUEUE": "pikku-workflow-step-worker",
    # Extra attempts after the first, for steps that do not say.
    "DEFAULT_RETRIES": 5,
    # A duration, or "exponential": 1s doubling up to MAX_RETRY_DELAY.
    "DEFAULT_RETRY_DELAY": "exponential",
    "MAX_RETRY_DELAY": "60s",
    "STALLED_AFTER": "5min",
    "UNDISPATCHED_AFTER": "30s",
    "LEASE_TIMEOUT": "30s",
    # A worker whose pass reaches a queued step outside a fan-out, on a queue it serves,
    # runs that step itself rather than sending it through Redis to another worker.
    "EAGER_QUEUED_STEPS": True,
    # PostgreSQL: the engine's hot statements are prepared on the server, once per
    # connection. False behind a pooler in transaction mode without prepared statement
    # support (PgBouncer before 1.21, or max_prepared_statements = 0).
    "PREPARED_STATEMENTS": True,
    "MAX_INPUT_BYTES": 1024 * 1024,
    # How many ancestors a child run may have (a run started by code has none).
    "MAX_CHILD_DEPTH": 32,
    # The REST API's run/: how long a request waits for its run (then 202; the run goes
    # on), and the most a body's own timeout may ask.
    "RUN_TIMEOUT": "30s",
    # The REST API's runs/{id}/stream/: how many a user may have open at once (429
    # beyond), counted in Django's default cache; None: no cap.
    "MAX_STREAMS_PER_USER": 4,
    "API_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Dotted path of a write-only companion receiving every committed write, or None.
    "MIRROR": None,
    # Dotted path of a callable receiving approval audit records; None: Django logging.
    "AUDIT": None,
    # Prometheus metrics (pikku_workflows.metrics, the `metrics` extra): connect their
    # signal receivers at startup; the /metrics view also admits this bearer token.
    "METRICS": False,
    "METRICS_TOKEN": None,
    # OpenTelemetry traces of passes and steps (pikku_workflows.tracing, the `otel`
    # extra): install its tracer into the engine's hook points at startup.
    "TRACING": False,
    # Failure alerts (pikku_workflows.alerts): None, off; a dict of ALERT_DEFAULTS' keys.
    "ALERTS": None,
    # RQ's worker TTL for pikku_worker, in seconds: an idle worker beats every
    # WORKER_TTL - 15 s and RQ holds it alive WORKER_TTL + 60 s after its last beat, so a
    # killed worker leaves the console's worker list within that (RQ's default: 420 s).
    "WORKER_TTL": 30,
    # Named step limits: {"openai": {"concurrency": 5, "rate": "100/min"}}; functions
    # name them (``function(limits=[...])``); the admin's Limits page overrides them.
    "LIMITS": {},
}

#: The longest limit name (``WorkflowLimit.name``'s column).
LIMIT_NAME_MAX = 100


DURATION_SETTINGS = frozenset(
    {"MAX_RETRY_DELAY", "STALLED_AFTER", "UNDISPATCHED_AFTER", "LEASE_TIMEOUT",
     "RUN_TIMEOUT"}
)
BOOLEAN_SETTINGS = frozenset({"EAGER_QUEUED_STEPS", "PREPARED_STATEMENTS", "METRICS",
                              "TRACING"})
#: The keys of the ``ALERTS`` setting and their defaults.
ALERT_DEFAULTS: dict[str, Any] = {"MAIL_ADMINS": False, "WEBHOOK_URL": None,
                                  "THROTTLE": "15min"}
IMPORT_STRINGS = frozenset({"API_PERMISSION_CLASSES", "MIRROR", "AUDIT"})
EXECUTORS = frozenset({"inline", "rq"})


class PikkuSettings:
    """Attribute access to the ``PIKKU_WORKFLOWS`` dict, with defaults and validation."""

    if TYPE_CHECKING:
        # The types of the validated values (``__getattr__`` computes them at run time).
        EXECUTOR: str
        RQ_CONNECTION: str
        ORCHESTRATOR_QUEUE: str
        STEP_WORKER_QUEUE: str
        DEFAULT_RETRIES: int
        DEFAULT_RETRY_DELAY: float | str
        MAX_RETRY_DELAY: float
        STALLED_AFTER: float
        UNDISPATCHED_AFTER: float
        LEASE_TIMEOUT: float
        EAGER_QUEUED_STEPS: bool
        PREPARED_STATEMENTS: bool
        MAX_INPUT_BYTES: int
        MAX_CHILD_DEPTH: int
        RUN_TIMEOUT: float
        MAX_STREAMS_PER_USER: int | None
        API_PERMISSION_CLASSES: list[type[Any]]  # DRF permission classes (untyped here)
        MIRROR: object  # a Mirror subclass or instance, or None
        AUDIT: Callable[[dict[str, object]], object] | None
        METRICS: bool
        METRICS_TOKEN: str | None
        TRACING: bool
        ALERTS: dict[str, Any] | None  # MAIL_ADMINS, WEBHOOK_URL, THROTTLE (seconds)
        WORKER_TTL: int
        LIMITS: dict[str, dict[str, Any]]

    def __init__(self) -> None:
        self._cache: dict[str, object] = {}
        self._user: dict[str, object] | None = None

    @property
    def user_settings(self) -> dict[str, object]:
        if self._user is None:
            raw = getattr(django_settings, "PIKKU_WORKFLOWS", None) or {}
            if not isinstance(raw, dict):
                raise WorkflowConfigurationError("PIKKU_WORKFLOWS must be a dict")
            unknown = sorted(set(raw) - set(DEFAULTS))
            if unknown:
                hints = "".join(f"{name}: {hint}; " for name in unknown
                                if (hint := did_you_mean(name)))
                raise WorkflowConfigurationError(
                    f"unknown PIKKU_WORKFLOWS setting(s) {', '.join(unknown)}; {hints}"
                    f"known settings are {', '.join(sorted(DEFAULTS))}"
                )
            self._user = raw
        return self._user

    def __getattr__(self, name: str) -> object:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"invalid PIKKU_WORKFLOWS setting: {name!r}")
        if name not in self._cache:
            value = self.user_settings.get(name, DEFAULTS[name])
            self._cache[name] = self._validate(name, value)
        return self._cache[name]

    def _validate(self, name: str, value: Any) -> object:
        if name == "EXECUTOR" and value not in EXECUTORS:
            _check_executor_path(value)
        if name in DURATION_SETTINGS:
            try:
                return parse_duration(value, what=f"PIKKU_WORKFLOWS['{name}']")
            except ValueError as exc:
                raise WorkflowConfigurationError(str(exc)) from exc
        if name == "DEFAULT_RETRIES" and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise WorkflowConfigurationError(
                "PIKKU_WORKFLOWS['DEFAULT_RETRIES'] must be an int >= 0"
            )
        if name == "MAX_CHILD_DEPTH" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise WorkflowConfigurationError(
                "PIKKU_WORKFLOWS['MAX_CHILD_DEPTH'] must be an int >= 1")
        if name == "MAX_STREAMS_PER_USER" and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise WorkflowConfigurationError(
                "PIKKU_WORKFLOWS['MAX_STREAMS_PER_USER'] must be an int >= 1 or None")
        if name == "WORKER_TTL" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 16):
            raise WorkflowConfigurationError(
                "PIKKU_WORKFLOWS['WORKER_TTL'] must be an int >= 16 (seconds)")
        if name == "LIMITS":
            return validate_limits(value)
        if name == "ALERTS":
            return validate_alerts(value)
        if name in BOOLEAN_SETTINGS and not isinstance(value, bool):
            raise WorkflowConfigurationError(f"PIKKU_WORKFLOWS['{name}'] must be True or False")
        if name == "METRICS_TOKEN" and value is not None and (
                not isinstance(value, str) or not value):
            raise WorkflowConfigurationError(
                "PIKKU_WORKFLOWS['METRICS_TOKEN'] must be a non-empty string or None")
        if name in IMPORT_STRINGS and value is not None:
            if isinstance(value, list | tuple):
                return [import_string(v) if isinstance(v, str) else v for v in value]
            return import_string(value) if isinstance(value, str) else value
        return value

    def reload(self) -> None:
        """Forget cached values; the next access reads the settings again."""
        self._cache.clear()
        self._user = None


def _check_executor_path(value: object) -> None:
    """A custom ``EXECUTOR``: the dotted path of an executor class (an
    ``engine.dispatch.Executor`` subclass, which this layer cannot import to check)."""
    expected = f"expected one of {sorted(EXECUTORS)} or the dotted path of an Executor subclass"
    if not isinstance(value, str) or "." not in value:
        raise WorkflowConfigurationError(f"PIKKU_WORKFLOWS['EXECUTOR'] is {value!r}; {expected}")
    try:
        found = import_string(value)
    except ImportError as exc:
        raise WorkflowConfigurationError(
            f"PIKKU_WORKFLOWS['EXECUTOR'] is {value!r}, which does not import: {exc}") from exc
    if not isinstance(found, type) or not all(
            callable(getattr(found, method, None)) for method in ("enqueue_pass", "dispatch_step")):
        raise WorkflowConfigurationError(
            f"PIKKU_WORKFLOWS['EXECUTOR'] is {value!r}, which is not an executor class; "
            f"{expected}")


pikku_settings = PikkuSettings()


def limit_errors(name: object, spec: object) -> list[str]:
    """What is wrong with one named limit (empty: it is valid)."""
    where = f"PIKKU_WORKFLOWS['LIMITS'][{name!r}]"
    if not isinstance(name, str) or not name or len(name) > LIMIT_NAME_MAX:
        return [f"{where}: a limit name must be a non-empty string of at most "
                f"{LIMIT_NAME_MAX} characters"]
    if not isinstance(spec, dict):
        return [f"{where} must be a dict with 'concurrency' and/or 'rate'"]
    errors = []
    unknown = sorted(map(str, set(spec) - {"concurrency", "rate"}))
    if unknown:
        errors.append(f"{where} has unknown key(s) {', '.join(unknown)}; known keys are "
                      "concurrency and rate")
    concurrency = spec.get("concurrency")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(
            concurrency, int) or concurrency < 1):
        errors.append(f"{where}['concurrency'] is {concurrency!r}: must be an int >= 1 "
                      "(or None: no concurrency limit)")
    rate = spec.get("rate")
    if rate is not None:
        try:
            parse_rate(rate, what=f"{where}['rate']")
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def validate_limits(value: object) -> dict[str, dict[str, Any]]:
    """The ``LIMITS`` setting, checked.

    Raises:
        WorkflowConfigurationError: It is not a dict of valid named limits.
    """
    if not isinstance(value, dict):
        raise WorkflowConfigurationError("PIKKU_WORKFLOWS['LIMITS'] must be a dict of named "
                                         "limits, e.g. {'openai': {'concurrency': 5}}")
    errors = [error for name, spec in value.items() for error in limit_errors(name, spec)]
    if errors:
        raise WorkflowConfigurationError("; ".join(errors))
    return value


def validate_alerts(value: object) -> dict[str, Any] | None:
    """The ``ALERTS`` setting, checked, with its defaults and ``THROTTLE`` in seconds.

    Raises:
        WorkflowConfigurationError: It is neither None nor a dict of valid alert keys.
    """
    if value is None:
        return None
    where = "PIKKU_WORKFLOWS['ALERTS']"
    if not isinstance(value, dict):
        raise WorkflowConfigurationError(
            f"{where} must be None or a dict, e.g. {{'MAIL_ADMINS': True, "
            "'THROTTLE': '15min'}")
    unknown = sorted(map(str, set(value) - set(ALERT_DEFAULTS)))
    if unknown:
        raise WorkflowConfigurationError(
            f"{where} has unknown key(s) {', '.join(unknown)}; known keys are "
            f"{', '.join(ALERT_DEFAULTS)}")
    alerts = {**ALERT_DEFAULTS, **value}
    if not isinstance(alerts["MAIL_ADMINS"], bool):
        raise WorkflowConfigurationError(f"{where}['MAIL_ADMINS'] must be True or False")
    url = alerts["WEBHOOK_URL"]
    if url is not None and (not isinstance(url, str) or
                            not url.startswith(("http://", "https://")) or " " in url):
        raise WorkflowConfigurationError(
            f"{where}['WEBHOOK_URL'] is {url!r}: must be an http:// or https:// URL, or None")
    try:
        alerts["THROTTLE"] = parse_duration(alerts["THROTTLE"], what=f"{where}['THROTTLE']")
    except ValueError as exc:
        raise WorkflowConfigurationError(str(exc)) from exc
    return alerts


def did_you_mean(name: object) -> str | None:
    """``"did you mean 'EXECUTOR'?"`` for a misspelt setting name, or None."""
    close = difflib.get_close_matches(str(name), DEFAULTS, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def validate_setting(name: str, value: Any) -> object:
    """The value of setting ``name`` as the engine would use it, checked as at run time.

    Raises:
        WorkflowConfigurationError: The value is not valid for ``name``.
        ImportError: A dotted path in it does not import.
    """
    return pikku_settings._validate(name, value)


def _reload_on_change(*, setting: str, **kwargs: object) -> None:
    if setting == "PIKKU_WORKFLOWS":
        pikku_settings.reload()


setting_changed.connect(_reload_on_change)
