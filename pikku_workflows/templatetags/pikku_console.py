"""Template tags of the console: a date hierarchy that reads no more than two index ends,
and times shown in the current time zone."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.db.models import Max, Min, QuerySet
from django.utils import formats, timezone
from django.utils.html import format_html

from ..engine.clock import clock

register = template.Library()

_STEP = {"year": "years", "month": "months", "day": "days"}


class BoundedPeriods:
    """Stands in for the changelist's queryset in Django's date hierarchy: the periods come
    from the indexed MIN and MAX of the field, not from a DISTINCT over every row (which
    reads a million rows for a million runs)."""

    def __init__(self, queryset: QuerySet[Any]) -> None:
        self.queryset = queryset

    def aggregate(self, **kwargs: Any) -> dict[str, Any]:
        return self.queryset.order_by().aggregate(**kwargs)

    def datetimes(self, field: str, kind: str) -> list[datetime]:
        bounds = self.aggregate(first=Min(field), last=Max(field))
        if bounds["first"] is None:
            return []
        first, last = (timezone.localtime(bounds[k]) for k in ("first", "last"))
        periods = []
        current = first.replace(month=1 if kind == "year" else first.month,
                                day=1 if kind in ("year", "month") else first.day,
                                hour=0, minute=0, second=0, microsecond=0)
        while current <= last:
            periods.append(current)
            if kind == "year":
                current = current.replace(year=current.year + 1)
            elif kind == "month":
                current = (current.replace(day=28) + timedelta(days=4)).replace(day=1)
            else:
                current += timedelta(days=1)
        return periods

    dates = datetimes


class _BoundedChangeList:
    def __init__(self, changelist: Any) -> None:
        self._changelist = changelist
        self.queryset = BoundedPeriods(changelist.queryset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._changelist, name)


@register.inclusion_tag("admin/date_hierarchy.html")
def bounded_date_hierarchy(changelist: Any) -> dict[str, Any]:
    """Django's date hierarchy, at a constant cost whatever the number of runs."""
    return date_hierarchy(_BoundedChangeList(changelist)) or {}  # type: ignore[arg-type]


def _time_element(value: datetime | None, fmt: str, *, zone: bool) -> str:
    if value is None:
        return "-"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    shown = formats.date_format(local, fmt)
    if zone:
        shown = f"{shown} {local.tzname() or ''}".rstrip()
    full = f"{local.isoformat(sep=' ')} ({local.tzname()})"
    return format_html('<time datetime="{}" title="{}">{}</time>',
                       value.isoformat(), full, shown)


@register.filter
def pk_datetime(value: datetime | None) -> str:
    """A time as the runs list shows it (``DATETIME_FORMAT``, the current time zone),
    with the zone; the exact time, to the microsecond, in its tooltip."""
    return _time_element(value, "DATETIME_FORMAT", zone=True)


#: The list's time of day (``P``: "3:45 p.m."), to the second: attempts a few seconds
#: apart must not read alike.
TIME_WITH_SECONDS = "g:i:s a"


@register.filter
def pk_time(value: datetime | None) -> str:
    """The time of day of ``value`` in the current time zone, to the second, without
    the zone (the table's header names it); the exact time in its tooltip."""
    return _time_element(value, TIME_WITH_SECONDS, zone=False)


@register.simple_tag
def pk_zone() -> str:
    """The current time zone's name (the user's, when the project activates one)."""
    return str(timezone.get_current_timezone_name())


@register.filter
def pk_when(value: datetime | None) -> str:
    """A time as short as the graph says it, in the current time zone: the time alone
    today (``16:05``), else the date without the year (``Dec 4 16:05``), with the year
    when another; the exact time, date and zone in its tooltip."""
    if value is None:
        return "-"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    today = timezone.localtime(clock().now())
    if local.date() == today.date():
        shown = f"{local:%H:%M}"
    elif local.year == today.year:
        shown = f"{local:%b} {local.day} {local:%H:%M}"
    else:
        shown = f"{local:%Y-%m-%d %H:%M}"
    full = f"{local.isoformat(sep=' ')} ({local.tzname()})"
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), full,
                       shown)


#: The most of a value's JSON a table cell shows.
JSON_SHOWN = 200


@register.filter
def pk_json(value: Any) -> str:
    """A JSON value on one line, cut to ``JSON_SHOWN`` characters."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= JSON_SHOWN else text[:JSON_SHOWN - 1] + "…"
