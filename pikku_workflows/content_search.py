"""Runs by content: JSON containment on a run's input or output, alike on every database."""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import connections
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from .models import WorkflowRun

#: The fields a pattern may look into.
FIELDS = ("input", "output")
#: The most scalar values one pattern may name (each is a condition of the query).
MAX_LEAVES = 20
#: The deepest path a pattern may name.
MAX_DEPTH = 10
#: The integers both databases compare exactly (SQLite's are 64-bit).
INT_RANGE = (-(2**63), 2**63 - 1)

_SCALARS = (str, int, float, bool, type(None))


class ContentQueryError(ValueError):
    """A content pattern or search term no database can take; its message says why."""


def _refuse_constant(name: str) -> None:
    raise ContentQueryError(f"{name} is not a JSON value")


def parse_pattern(text: str) -> dict[str, Any]:
    """A JSON object given as text (``?input__contains={"order_id": 8}``), checked.

    Args:
        text: The JSON text.

    Returns:
        The pattern, as :func:`check_pattern` accepts it.

    Raises:
        ContentQueryError: not JSON, not an object, or a shape :func:`check_pattern`
            refuses.
    """
    try:
        pattern = json.loads(text, parse_constant=_refuse_constant)
    except ContentQueryError:
        raise
    except RecursionError:
        raise ContentQueryError("the JSON is nested too deeply") from None
    except ValueError as exc:
        raise ContentQueryError(f"not valid JSON: {exc}") from None
    check_pattern(pattern)
    return pattern  # type: ignore[no-any-return]  # an object, checked above


def check_pattern(pattern: object) -> None:
    """Refuses a pattern outside the shapes both databases answer alike: an object of at
    least one key whose values are scalars (string, number, true, false, null) or such
    objects again. Arrays and empty objects are refused (PostgreSQL's ``@>`` and SQLite
    would answer differently), as are integers outside 64 bits.

    Raises:
        ContentQueryError: with the reason.
    """
    if not isinstance(pattern, dict):
        raise ContentQueryError("the pattern must be a JSON object, e.g. {\"order_id\": 8}")
    leaves = list(_leaves(pattern, ()))
    if len(leaves) > MAX_LEAVES:
        raise ContentQueryError(f"at most {MAX_LEAVES} values in one pattern")


def _leaves(value: dict[str, Any], path: tuple[str, ...]) -> Any:
    if not value:
        raise ContentQueryError(
            "an empty object matches nothing here: name at least one key"
            + (f" under {'.'.join(path)}" if path else ""))
    if len(path) >= MAX_DEPTH:
        raise ContentQueryError(f"paths are at most {MAX_DEPTH} keys deep")
    for key, item in value.items():
        where = (*path, key)
        if isinstance(item, dict):
            yield from _leaves(item, where)
        elif isinstance(item, list):
            raise ContentQueryError(
                f"arrays are not supported in a pattern ({'.'.join(where)})")
        elif isinstance(item, _SCALARS):
            if isinstance(item, int) and not isinstance(item, bool) \
                    and not INT_RANGE[0] <= item <= INT_RANGE[1]:
                raise ContentQueryError(f"{'.'.join(where)}: the number is out of range")
            yield where, item
        else:  # pragma: no cover - json.loads gives no other type
            raise ContentQueryError(f"{'.'.join(where)}: not a JSON value")


def _storable(text: str) -> bool:
    """Whether a run's JSON can hold ``text``: PostgreSQL's ``jsonb`` holds no NUL
    character, and no stored text is a lone surrogate."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def filter_contains(queryset: QuerySet[WorkflowRun], field: str,
                    pattern: dict[str, Any]) -> QuerySet[WorkflowRun]:
    """The runs whose ``field`` (``input`` or ``output``) contains ``pattern``, with
    PostgreSQL's ``@>`` semantics: every key of the pattern is there, with an equal
    scalar (a number equals the same number written as an integer or a decimal; ``true``
    is not ``1``; ``null`` is a JSON null, not a missing key) or an object containing the
    nested pattern. PostgreSQL answers with ``@>`` (the GIN index of migration 0010);
    SQLite, which has no such operator, looks each path up with ``json_each`` and reads
    every row.

    Args:
        queryset: The runs to narrow.
        field: ``"input"`` or ``"output"``.
        pattern: A pattern :func:`check_pattern` accepts.

    Returns:
        The narrowed queryset.
    """
    if field not in FIELDS:
        raise ContentQueryError(f"unknown field {field!r}: input or output")
    check_pattern(pattern)
    if not all(_storable(key) and (not isinstance(value, str) or _storable(value))
               for path, value in _leaves(pattern, ()) for key in path):
        return queryset.none()  # no run holds such text
    if connections[queryset.db].vendor == "postgresql":
        return queryset.filter(**{f"{field}__contains": pattern})
    column = f'"{queryset.model._meta.db_table}"."{field}"'
    for path, value in _leaves(pattern, ()):
        queryset = queryset.filter(_sqlite_leaf(column, path, value))
    return queryset


def _sqlite_leaf(column: str, path: tuple[str, ...], value: object) -> RawSQL:
    """``column`` holds ``value`` at ``path``, with one ``json_each`` per key: its ``key``
    is the decoded key (a JSON path would compare the escaped text, so that ``café``,
    stored as ``caf\\u00e9``, would never match)."""
    joins = [f"json_each({column}) AS k0"]
    where = [f"json_type({column}) = 'object'", "k0.key = %s"]
    for depth in range(1, len(path)):
        joins.append(f"json_each(k{depth - 1}.value) AS k{depth}")
        where += [f"k{depth - 1}.type = 'object'", f"k{depth}.key = %s"]
    last = f"k{len(path) - 1}"
    params: list[object] = list(path)
    if value is None:
        where.append(f"{last}.type = 'null'")
    elif isinstance(value, bool):
        where.append(f"{last}.type = '{'true' if value else 'false'}'")
    elif isinstance(value, str):
        where.append(f"{last}.type = 'text' AND {last}.atom = %s")
        params.append(value)
    else:
        where.append(f"{last}.type IN ('integer', 'real') AND {last}.atom = %s")
        params.append(value)
    # Only fixed fragments and the model's table name are in the text; keys and values
    # are parameters.
    sql = f"EXISTS (SELECT 1 FROM {', '.join(joins)} WHERE {' AND '.join(where)})"  # noqa: S608
    return RawSQL(sql, params, output_field=BooleanField())  # noqa: S611


#: One ``key=value`` part: a quoted value (JSON string escapes) or one word.
_TERM = re.compile(r'\s*(?P<path>[^=\s"]+)=(?P<value>"(?:[^"\\]|\\.)*"|[^\s"]*)(?=\s|$)\s*')


def parse_search(term: str) -> dict[str, dict[str, Any]]:
    """The console's search syntax: ``key=value`` parts separated by spaces, all of which
    must match. ``key`` is a dotted path (``customer.email``) into the run's input; a path
    starting with ``input.`` or ``output.`` names the field (``output.total=12``;
    ``input.input=1`` for an input key called ``input``). ``value`` is read as JSON when it
    parses (``8``, ``1.5``, ``true``, ``null``, ``"8"`` for the string), otherwise it is
    the text as typed; quote a value with spaces (``name="Ada Lovelace"``).

    Args:
        term: The search box's text.

    Returns:
        ``{"input": pattern, "output": pattern}``, each present when named.

    Raises:
        ContentQueryError: a part is not ``key=value``, or the patterns are refused.
    """
    patterns: dict[str, dict[str, Any]] = {}
    position, term = 0, term.strip()
    while position < len(term):
        match = _TERM.match(term, position)
        if match is None:
            part = term[position:].split(None, 1)[0]
            if '="' in part:
                raise ContentQueryError(f"{part!r}: unbalanced quotes")
            raise ContentQueryError(f"{part!r} is not key=value")
        position = match.end()
        keys = match["path"].split(".")
        field = "input"
        if keys[0] in FIELDS and len(keys) > 1:
            field, keys = keys[0], keys[1:]
        if any(not key for key in keys):
            raise ContentQueryError(f"{match['path']!r}: a key is empty")
        text = match["value"]
        try:
            value = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            value = text
        node = patterns.setdefault(field, {})
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ContentQueryError(f"{match['path']!r} conflicts with another part")
            node = child
        if keys[-1] in node:
            raise ContentQueryError(f"{match['path']!r} is named twice")
        node[keys[-1]] = value
    for pattern in patterns.values():
        check_pattern(pattern)
    return patterns


def looks_like_content_search(term: str) -> bool:
    """Whether a search box's text is a content search (it has a ``key=value`` part)."""
    return "=" in term
