"""Counting and paging that stay fast on run tables of millions of rows (API and console)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
from django.db.models import QuerySet

from .engine.store.backends import backend

if TYPE_CHECKING:
    # Django's Paginator takes no type argument at run time.
    _PaginatorBase = Paginator[Any]
else:
    _PaginatorBase = Paginator

#: Counts are exact up to this many rows; above it they are the planner's estimate.
COUNT_CAP = 1_000


def estimated_count(queryset: QuerySet[Any]) -> int | None:
    """The database's own row estimate for ``queryset`` (PostgreSQL), or None elsewhere."""
    return backend(queryset.db).estimated_count(queryset)


def bounded_count(queryset: QuerySet[Any], cap: int = COUNT_CAP) -> tuple[int, bool]:
    """``(count, exact)``: exact up to ``cap`` rows, else an estimate of at least ``cap + 1``.

    Counting reads at most ``cap + 1`` index entries, so the cost of a page does not grow
    with the table (a plain ``COUNT(*)`` of a million runs reads a million).
    """
    counted = queryset.order_by()[: cap + 1].count()
    # Asked for whatever the count (a catalog read or an EXPLAIN, about a millisecond), so
    # that a page costs the same queries at a thousand runs and at a million.
    estimate = estimated_count(queryset)
    if counted <= cap:
        return counted, True
    return max(counted, estimate or 0), False


class BoundedCountPaginator(_PaginatorBase):
    """A ``Paginator`` whose ``count`` is :func:`bounded_count`; ``count_is_exact`` tells."""

    count_is_exact = True

    @cached_property
    def count(self) -> int:
        if not isinstance(self.object_list, QuerySet):
            return len(self.object_list)
        total, self.count_is_exact = bounded_count(self.object_list)
        return total
