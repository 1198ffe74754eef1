"""The runs list's filters (django-filter): each value checked, so that none the database
cannot take reaches it (a 400 naming the filter, never a 500)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import django_filters
from django import forms
from django.conf import settings
from django.utils import timezone
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema_field

from ..content_search import ContentQueryError, filter_contains, parse_pattern
from ..models import WorkflowRun
from ..status import RunStatus

#: The largest offset from UTC a time may carry: no time zone is further (UTC-12:00 to
#: UTC+14:00). PostgreSQL refuses offsets from 16 hours, Python's from 24.
MAX_UTC_OFFSET = timedelta(hours=14)


def checked_datetime(moment: datetime) -> datetime:
    """``moment`` as the database compares it: in UTC (naive, in the current time zone,
    when ``USE_TZ`` is off).

    Raises:
        ValueError: its offset is over 14 hours, or it is outside years 1 to 9999 once in
            UTC (``9999-12-31T23:00-05:00``).
    """
    offset = moment.utcoffset()
    if offset is not None and abs(offset) > MAX_UTC_OFFSET:
        raise ValueError(f"the offset from UTC is at most 14:00, not {offset}")
    try:
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
        moment = moment.astimezone(UTC)
        if not settings.USE_TZ:
            moment = timezone.make_naive(moment)
    except (OverflowError, ValueError):
        raise ValueError("out of range: years 1 to 9999") from None
    return moment


class CheckedIsoDateTimeField(IsoDateTimeField):  # type: ignore[misc]  # untyped library
    """An ISO 8601 time the database can take (see :func:`checked_datetime`)."""

    def to_python(self, value: Any) -> datetime | None:
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return checked_datetime(moment)
        except ValueError as exc:
            raise forms.ValidationError(f"Enter a valid date/time: {exc}.",
                                        code="invalid") from None


#: The schema's pattern of the times the filters take: years 2 to 9998 (a time in year 1
#: or 9999 may leave the calendar once in UTC) and an offset of at most 14 hours.
DATETIME_PATTERN = (r"^(?:000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}"
                    r"|99[0-8][0-9])-.*(?:[Zz]|[+-](?:0[0-9]|1[0-3]):[0-5][0-9]|[+-]14:00)$")


@extend_schema_field({"type": "string", "format": "date-time", "pattern": DATETIME_PATTERN})
class CheckedIsoDateTimeFilter(django_filters.IsoDateTimeFilter):  # type: ignore[misc]
    field_class = CheckedIsoDateTimeField


# django-filter ships no type hints: its classes are Any to mypy.
@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**63 - 1})
class IdFilter(django_filters.NumberFilter):  # type: ignore[misc]
    """A row id: a whole number a database column can hold (a larger one is a 400, not an
    overflow in the database driver)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


class ContentPatternField(forms.Field):
    """A JSON object a run's input or output must contain (``content_search``)."""

    def __init__(self, *args: Any, max_length: int = 4000, **kwargs: Any) -> None:
        self.max_length = max_length
        super().__init__(*args, **kwargs)

    def to_python(self, value: Any) -> dict[str, Any] | None:
        text = str(value or "").strip()
        if not text:
            return None
        if len(text) > self.max_length:
            raise forms.ValidationError(
                f"Ensure this value has at most {self.max_length} characters.",
                code="max_length")
        try:
            return parse_pattern(text)
        except ContentQueryError as exc:
            raise forms.ValidationError(
                f"Enter a JSON object to match, such as {{\"order_id\": 8}}: {exc}.",
                code="invalid") from None


CONTENT_HELP = (
    "A JSON object the run's {field} must contain, as PostgreSQL's @> reads it: every key "
    "present with an equal value, nested objects matched key by key (for example "
    '{{"order_id": 8}} or {{"customer": {{"email": "ada@example.com"}}}}). Values are '
    "strings, numbers, true, false, null or such objects; arrays and empty objects are "
    "refused (400). Indexed on PostgreSQL (GIN jsonb_path_ops); SQLite reads every run.")


#: The largest pattern, as text.
MAX_PATTERN_LENGTH = 4000


def _content_schema(field: str) -> dict[str, Any]:
    return {"type": "string", "format": "json", "maxLength": MAX_PATTERN_LENGTH,
            "example": '{"order_id": 8}', "description": CONTENT_HELP.format(field=field)}


_SCALAR_SCHEMAS: list[dict[str, Any]] = [
    {"type": "string", "maxLength": 100},
    {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
    {"type": "number", "minimum": -1e15, "maximum": 1e15},
    {"type": "boolean"},
]


def _object_schema(values: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "object", "minProperties": 1, "maxProperties": 4,
            "additionalProperties": {"anyOf": values, "nullable": True}}


#: What a pattern is, as OpenAPI describes a JSON-encoded query parameter (``content``):
#: objects of scalars, one level of nesting described (deeper is accepted too), at most
#: 16 values (the API takes 20).
CONTENT_PARAMETER_SCHEMA = _object_schema([*_SCALAR_SCHEMAS, _object_schema(_SCALAR_SCHEMAS)])


class ContentFilter(django_filters.Filter):  # type: ignore[misc]  # untyped, as above
    """``?input__contains={...}``: runs whose field contains the JSON object given."""

    field_class = ContentPatternField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_PATTERN_LENGTH)
        super().__init__(*args, **kwargs)

    def filter(self, qs: Any, value: dict[str, Any] | None) -> Any:
        if value is None:
            return qs
        return filter_contains(qs, self.field_name, value)


@extend_schema_field(_content_schema("input"))
class InputContentFilter(ContentFilter):
    """``?input__contains=``."""


@extend_schema_field(_content_schema("output"))
class OutputContentFilter(ContentFilter):
    """``?output__contains=``."""


class RunFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped, as above
    """``?workflow=&status=&owner=&created_after=&created_before=``; each hits an index;
    ``input__contains=`` and ``output__contains=``, the GIN indexes on PostgreSQL."""

    workflow = django_filters.CharFilter(field_name="workflow", max_length=200)
    status = django_filters.ChoiceFilter(field_name="status", choices=RunStatus.choices)
    owner = IdFilter(field_name="owner_id")
    created_after = CheckedIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = CheckedIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    input__contains = InputContentFilter(field_name="input")
    output__contains = OutputContentFilter(field_name="output")

    class Meta:
        model = WorkflowRun
        fields: list[str] = []
