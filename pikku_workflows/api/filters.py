"""Run list filters (django-filter) and the pagination that stays fast at millions of runs."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from rest_framework.pagination import PageNumberPagination

from ..models import WorkflowRun
from ..paging import BoundedCountPaginator
from ..status import RunStatus


# django-filter ships no type hints: its classes are Any to mypy.
class IdFilter(django_filters.NumberFilter):  # type: ignore[misc]
    """A row id: a whole number a database column can hold (a larger one is a 400, not an
    overflow in the database driver)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


class RunFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped, as above
    """``?workflow=&status=&owner=&created_after=&created_before=``; each hits an index."""

    workflow = django_filters.CharFilter(field_name="workflow", max_length=200)
    status = django_filters.ChoiceFilter(field_name="status", choices=RunStatus.choices)
    owner = IdFilter(field_name="owner_id")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = WorkflowRun
        fields: list[str] = []


class RunPagination(PageNumberPagination):
    """``{count, next, previous, results}``, newest first.

    ``count`` is exact up to 1,000 runs and the database's estimate above (see
    ``pikku_workflows.paging``): a plain ``COUNT(*)`` of a million filtered runs on every
    page would cost more than the page itself.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    django_paginator_class = BoundedCountPaginator

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        response = super().get_paginated_response_schema(schema)
        response["properties"]["count"]["description"] = (
            "Exact up to 1,000; above, the database's estimate.")
        return response
