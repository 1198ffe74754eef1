"""Checks shared by every way of declaring a step: ``@function``, ``wf.do`` and graph nodes."""

from __future__ import annotations

import unicodedata
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
