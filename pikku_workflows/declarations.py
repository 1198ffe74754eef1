"""Checks shared by every way of declaring a step: ``@function``, ``wf.do`` and graph nodes."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .durations import parse_duration
from .exceptions import WorkflowDefinitionError, WorkflowInputError

#: The longest event name, event key, topic and idempotency key of events and messages
#: (the model columns).
NAME_MAX_LENGTH = 255


def check_step_options(owner: str, *, retries: object = None,
                       retry_delay: float | str | None = None,
                       timeout: float | str | None = None) -> None:
    """Refuse retry and timeout options that cannot work, before anything runs.

    Args:
        owner: What the options belong to, for the message (``"step 'Charge'"``).
        retries: Extra attempts: an int >= 0, or None.
        retry_delay: A duration, ``"exponential"``, or None.
        timeout: A duration, or None.

    Raises:
        WorkflowDefinitionError: An option is invalid; the message names ``owner``.
    """
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                or retries < 0):
        raise WorkflowDefinitionError(f"{owner}: retries must be an int >= 0, not {retries!r}")
    try:
        if retry_delay is not None and retry_delay != "exponential":
            parse_duration(retry_delay, what="retry_delay")
        if timeout is not None:
            parse_duration(timeout, what="timeout")
    except ValueError as exc:
        raise WorkflowDefinitionError(f"{owner}: {exc}") from None


def check_serializers(owner: str, **serializers: object) -> None:
    """Refuse a serializer that is not a class (an instance, a string).

    Raises:
        WorkflowDefinitionError: Naming ``owner`` and the serializer's role.
    """
    for role, value in serializers.items():
        if value is not None and not isinstance(value, type):
            raise WorkflowDefinitionError(
                f"{owner}: {role} must be a serializer class (such as a DRF Serializer "
                f"subclass), not {value!r}")


def shown(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_name(value: Any, field: str, *, optional: bool = False,
               error: type[Exception] = WorkflowInputError) -> None:
    """Refuse an event name, key, topic or idempotency key that is not storable text.

    Args:
        value: The value.
        field: Its name in the error (``event``, ``key``, ``topic``, ``idempotency_key``).
        optional: Whether None is allowed.
        error: The exception to raise (``WorkflowDefinitionError`` for a workflow's code).

    Raises:
        WorkflowInputError: (or ``error``) naming the field and what is wrong.
    """
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        raise error(f"{field} must be a non-empty string, not {shown(value)}")
    if len(value) > NAME_MAX_LENGTH:
        raise error(f"{field} is {len(value)} characters long; the limit is "
                    f"{NAME_MAX_LENGTH}")
    if not value.isprintable() and any(
            unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise error(f"{field} {shown(value)} contains control characters or lone "
                    "surrogates")


def flow_options(what: str, concurrency: Any, timeout: Any) -> dict[str, Any]:
    """A workflow's flow-control options as its definition's ``extra`` (DESIGN 8.4).

    Raises:
        WorkflowDefinitionError: ``concurrency`` is not a ``Concurrency`` or None, or
            ``timeout`` is not a positive duration.
    """
    extra: dict[str, Any] = {}
    if concurrency is not None:
        if not isinstance(concurrency, Concurrency):
            raise WorkflowDefinitionError(
                f"{what}: concurrency must be a Concurrency(max, key, on_full), not "
                f"{concurrency!r:.60}")
        extra["concurrency"] = concurrency
    if timeout is not None:
        try:
            seconds = parse_duration(timeout, what="timeout")
        except ValueError as exc:
            raise WorkflowDefinitionError(f"{what}: {exc}") from None
        if seconds <= 0:
            raise WorkflowDefinitionError(f"{what}: the timeout must be positive, not "
                                          f"{timeout!r}")
        extra["timeout"] = seconds
    return extra


# --- flow control (DESIGN 8.4; engine.flow applies them) ------------------------------------

#: The ``on_full`` policies of ``Concurrency``.
ON_FULL = ("queue", "skip", "cancel_running")
#: The longest concurrency or debounce key (the run's column).
KEY_MAX_LENGTH = 255


@dataclass(frozen=True)
class Concurrency:
    """At most ``max`` runs of a workflow per key hold a slot at once (DESIGN 8.4).

    Args:
        max: The number of slots per key (at least 1).
        key: A dotted path into the run input (``"customer.id"``), a callable of the
            input returning the key, or None: one key for all runs.
        on_full: What a start does when every slot of its key is held: ``"queue"`` (the
            run waits ``scheduled``, first in first out per key), ``"skip"`` (the run ends
            ``cancelled`` with code ``CONCURRENCY_LIMITED``) or ``"cancel_running"`` (the
            oldest live run of the key is cancelled and the new one starts).

    Raises:
        WorkflowDefinitionError: ``max`` is not an integer >= 1, ``key`` is neither a
            non-empty dotted path, a callable nor None, or ``on_full`` is unknown.
    """

    max: int = 1
    key: str | Callable[[Any], Any] | None = None
    on_full: str = "queue"

    def __post_init__(self) -> None:
        if isinstance(self.max, bool) or not isinstance(self.max, int) or self.max < 1:
            raise WorkflowDefinitionError(
                f"Concurrency max must be an integer of at least 1, not {self.max!r}")
        if self.key is not None and not callable(self.key) and (
                not isinstance(self.key, str) or not self.key.strip()
                or any(not part for part in self.key.split("."))):
            raise WorkflowDefinitionError(
                    f"Concurrency key must be a dotted path into the input (such as "
                    f"'customer.id'), a callable of the input or None, not {self.key!r}")
        if self.on_full not in ON_FULL:
            raise WorkflowDefinitionError(
                f"Concurrency on_full {self.on_full!r} is not one of {', '.join(ON_FULL)}")

    def describe(self) -> dict[str, Any]:
        """The declaration as JSON (the API's and admin's view of it)."""
        key = self.key if self.key is None or isinstance(self.key, str) else \
            getattr(self.key, "__qualname__", repr(self.key))
        return {"max": self.max, "key": key, "on_full": self.on_full}


@dataclass(frozen=True)
class Debounce:
    """Starts with the same ``key`` within ``period`` make one run (DESIGN 8.4).

    Each start replaces the waiting run's input and returns that run; the run starts
    ``period`` after the last start, or ``max_wait`` after the first, whichever is sooner.

    Raises:
        WorkflowInputError: The key is empty, too long or holds control characters; the
            period or max_wait is not a positive duration.
    """

    key: str
    period: float | int | str = "5s"
    max_wait: float | int | str | None = None

    def __post_init__(self) -> None:
        check_key(self.key, "debounce key")
        if self.period_seconds <= 0:
            raise WorkflowInputError(f"the debounce period {self.period!r} must be positive")
        if self.max_wait is not None and self.max_wait_seconds is not None and \
                self.max_wait_seconds <= 0:
            raise WorkflowInputError(
                f"the debounce max_wait {self.max_wait!r} must be positive")

    @property
    def period_seconds(self) -> float:
        return seconds_of(self.period, "debounce period")

    @property
    def max_wait_seconds(self) -> float | None:
        return None if self.max_wait is None else seconds_of(self.max_wait, "debounce max_wait")


def seconds_of(value: Any, what: str) -> float:
    try:
        return parse_duration(value, what=what)
    except ValueError as exc:
        raise WorkflowInputError(str(exc)) from None


def check_key(key: object, what: str) -> str:
    """A key is a non-empty string of at most ``KEY_MAX_LENGTH`` characters without
    control characters.

    Raises:
        WorkflowInputError: naming ``what`` and the problem.
    """
    if not isinstance(key, str) or not key:
        raise WorkflowInputError(f"the {what} must be a non-empty string, not {key!r:.60}")
    if len(key) > KEY_MAX_LENGTH:
        raise WorkflowInputError(
            f"the {what} is {len(key)} characters long; the limit is {KEY_MAX_LENGTH}")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in key):
        raise WorkflowInputError(f"the {what} {key!r:.60} contains control characters")
    return key


