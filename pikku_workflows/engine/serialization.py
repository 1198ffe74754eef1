"""JSON checks for everything a run stores: inputs, step data, results, outputs."""

from __future__ import annotations

import json
import re
from typing import Any

from ..conf import pikku_settings
from ..exceptions import WorkflowInputError

#: The deepest nesting of lists and objects a stored value may have. Deeper values cannot
#: be read back safely (decoders and renderers recurse), so they are refused up front.
MAX_JSON_DEPTH = 100

# What ``json.dumps`` writes (ASCII) for the characters no database may store in JSON:
# U+0000 (PostgreSQL's jsonb refuses it) and the surrogates (not Unicode scalar values).
_UNSTORABLE_ESCAPE = re.compile(r"\\u(?:0000|d[89a-f][0-9a-f]{2})")
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")
# A key as ``json.dumps`` writes an int, float, bool or None key. Only text holding one
# can come from a dict with non-str keys, whose keys may collide once written as text.
_CONVERTED_KEY = re.compile(r'"(?:-?[0-9][0-9.eE+-]*|true|false|null)":')


class NotSerializableError(TypeError):
    """A value cannot be stored as JSON; the message names where and which type."""


def _reject(value: Any) -> Any:
    raise TypeError(f"object of type {type(value).__name__} is not JSON-serializable")


def _unstorable_text(text: str) -> str | None:
    """Why a string cannot be stored (a NUL or a surrogate character), or None."""
    match = _UNSTORABLE_CHAR.search(text)
    if match is None:
        return None
    char = match.group()
    if char == "\x00":
        return "it contains the character U+0000 (NUL), which cannot be stored"
    return f"it contains the lone surrogate U+{ord(char):04X}, which is not valid Unicode"


def _check_strings_and_depth(value: Any, text: str, what: str) -> None:
    """Refuse unstorable characters in any string (keys too) and nesting past the limit.

    Both checks start from cheap scans of the encoded text; the value itself is walked
    only when they find something to look at.
    """
    problem = None
    suspicious_text = _UNSTORABLE_ESCAPE.search(text) is not None
    if suspicious_text or text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        stack: list[tuple[Any, int]] = [(value, 0)]
        while stack and problem is None:
            item, depth = stack.pop()
            if isinstance(item, str):
                if suspicious_text:
                    problem = _unstorable_text(item)
            elif isinstance(item, dict | list | tuple):
                if depth >= MAX_JSON_DEPTH:
                    problem = f"it is nested more than {MAX_JSON_DEPTH} levels deep"
                elif isinstance(item, dict):
                    stack.extend((key, depth) for key in item if isinstance(key, str))
                    stack.extend((child, depth + 1) for child in item.values())
                else:
                    stack.extend((child, depth + 1) for child in item)
    if problem is not None:
        raise NotSerializableError(f"{what} cannot be stored as JSON: {problem}")


def _check_key_collisions(value: Any, what: str) -> None:
    """Refuse a dict whose keys become the same text (``{1: "a", "1": "b"}``).

    JSON keys are text, so ``json.dumps`` writes both keys as ``"1"`` and the value read
    back keeps only the last. Only dicts with non-str keys are looked at closely.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(type(key) is str for key in item):
                seen: set[str] = set()
                for key in item:
                    text = key if isinstance(key, str) else json.dumps(key)
                    if text in seen:
                        raise NotSerializableError(
                            f"{what} cannot be stored as JSON: the key {text[:100]!r} occurs "
                            "more than once when its keys are written as text (JSON keys "
                            "are strings: 1 and '1' are the same key)")
                    seen.add(text)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def encode(value: Any, *, what: str) -> str:
    """Return ``value`` as JSON text, or raise ``NotSerializableError`` naming ``what``.

    Besides what JSON itself refuses (sets, objects, NaN...), a value is refused when it
    is nested more than ``MAX_JSON_DEPTH`` levels deep, holds a string with U+0000 or a
    lone surrogate, or a dict whose keys collide once written as text (``1`` and
    ``"1"``): the same refusal on every database, before anything is written.
    """
    try:
        text = json.dumps(value, allow_nan=False, default=_reject, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise NotSerializableError(f"{what} is not JSON-serializable: {exc}") from None
    except RecursionError:
        raise NotSerializableError(
            f"{what} cannot be stored as JSON: it is nested more than {MAX_JSON_DEPTH} "
            "levels deep") from None
    _check_strings_and_depth(value, text, what)
    if _CONVERTED_KEY.search(text) is not None:
        _check_key_collisions(value, what)
    return text


def normalize(value: Any, *, what: str) -> Any:
    """Return ``value`` as it will read back from the database (tuples become lists...).

    The first pass and every replay then see the same value.

    Raises:
        NotSerializableError: ``value`` cannot be stored (see ``encode``).
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        problem = _unstorable_text(value)
        if problem is not None:
            raise NotSerializableError(f"{what} cannot be stored as JSON: {problem}")
        return value
    return json.loads(encode(value, what=what))


def exception_message(exc: BaseException) -> str:
    """``str(exc)`` made storable in JSON; ``<unprintable Name>`` when ``str()`` raises.

    An exception whose ``__str__`` (or one of whose arguments' ``__str__``) raises must
    still be recorded: the attempt it ended is failed like any other.
    """
    try:
        text = str(exc)
    except Exception:
        return f"<unprintable {exc.__class__.__name__}>"
    return storable_text(text)


def storable_text(text: str) -> str:
    """``text`` with the characters no database stores in JSON written as escapes.

    For messages the engine records itself (exception messages), which must never make
    the write that records them fail.
    """
    return _UNSTORABLE_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def validated_json(serializer: Any, *, what: str) -> Any:
    """A valid serializer's data as a run stores it: its ``validated_data``, or, when that
    holds what JSON cannot (dates, decimals, UUIDs), the serializer's own representation
    of it (``serializer.data``: dates as ISO text...).

    Raises:
        NotSerializableError: Neither is JSON.
    """
    try:
        return normalize(serializer.validated_data, what=what)
    except NotSerializableError:
        return normalize(serializer.data, what=what)


def encoded_input(value: Any, what: str) -> str:
    """``value`` as JSON text, storable and at most ``MAX_INPUT_BYTES`` long.

    Raises:
        WorkflowInputError: naming ``what`` and the problem.
    """
    try:
        text = encode(value, what=what)
    except NotSerializableError as exc:
        raise WorkflowInputError(str(exc)) from None
    limit = pikku_settings.MAX_INPUT_BYTES
    size = len(text.encode())
    if size > limit:
        raise WorkflowInputError(
            f"{what} is {size} bytes; the limit (MAX_INPUT_BYTES) is {limit}")
    return text


def validated_input(definition: Any, data: Any) -> Any:
    """A workflow's input as a run stores it: checked (JSON, size) and, if the workflow
    has an ``input_serializer``, validated by it (its ``validated_data``).

    Raises:
        WorkflowInputError: The input is invalid, not JSON-serializable or too large.
    """
    text = encoded_input(data, f"the input of workflow '{definition.name}'")
    if definition.input_serializer is not None:
        serializer = definition.input_serializer(data=data)
        if not serializer.is_valid():
            raise WorkflowInputError(
                f"invalid input for workflow '{definition.name}'", errors=serializer.errors
            )
        what = f"the validated input of workflow '{definition.name}'"
        text = encode(validated_json(serializer, what=what), what=what)
    return json.loads(text)
