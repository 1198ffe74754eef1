"""JSON checks for everything a run stores: inputs, step data, results, outputs."""

from __future__ import annotations

import json
from typing import Any


class NotSerializableError(TypeError):
    """A value cannot be stored as JSON; the message names where and which type."""


def _reject(value: Any) -> Any:
    raise TypeError(f"object of type {type(value).__name__} is not JSON-serializable")


def encode(value: Any, *, what: str) -> str:
    """Return ``value`` as JSON text, or raise ``NotSerializableError`` naming ``what``."""
    try:
        return json.dumps(value, allow_nan=False, default=_reject, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise NotSerializableError(f"{what} is not JSON-serializable: {exc}") from None


def normalize(value: Any, *, what: str) -> Any:
    """Return ``value`` as it will read back from the database (tuples become lists...).

    The first pass and every replay then see the same value.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    return json.loads(encode(value, what=what))
