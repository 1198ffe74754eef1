"""Paging of the API's lists: page numbers by default, a cursor on request for ``runs/``.

Every paginated answer is ``{count, count_is_estimate, next, previous, results}``:

- ``page`` (a whole number from 1) and ``page_size`` (a whole number from 1; above 500 it
  is 500) are checked: anything else is a 400 naming the parameter, where DRF would
  silently fall back to its defaults. An empty value is the same as leaving it out.
- A page is past the end when it has no rows (and is not the first): a 404, even when
  ``count`` is an estimate. ``next`` is read from the page itself (one row more is
  fetched), so it is exact whatever ``count`` says.
- ``runs/?paginate=cursor`` pages by a cursor over ``(created_at, id)``, newest first:
  runs started between two requests neither repeat nor shift the pages that follow.
"""

from __future__ import annotations

import re
from base64 import b64decode
from collections import OrderedDict
from datetime import UTC
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from django.core.paginator import EmptyPage, Page, Paginator
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound
from rest_framework.pagination import BasePagination, CursorPagination, PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..paging import BoundedCountPaginator, bounded_count
from .errors import QueryError
from .filters import checked_datetime

if TYPE_CHECKING:
    # Django's Paginator takes no type argument at run time.
    _PaginatorBase = Paginator[Any]
    _PageBase = Page[Any]
else:
    _PaginatorBase = Paginator
    _PageBase = Page

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: A number longer than this is past the end of any list (and would overflow SQL).
_MAX_DIGITS = 12
_DIGITS = re.compile(r"[0-9]+")


def invalid(name: str, message: str) -> QueryError:
    """A 400 for the query parameter ``name``, ``message`` saying what it takes."""
    return QueryError({name: message}, message)


def whole_number(request: Request, name: str, *, default: int, maximum: int | None = None,
                 past_the_end: bool = False) -> int:
    """The query parameter ``name`` as a whole number from 1 (``default`` when absent or
    empty; at most ``maximum``).

    Raises:
        QueryError: it is not a whole number from 1.
        NotFound: ``past_the_end`` and the number is too long to be a page of any list.
    """
    raw = request.query_params.get(name, "")
    if raw == "":
        return default
    digits = raw.lstrip("0")
    if not _DIGITS.fullmatch(raw) or not digits:
        raise invalid(name, f"{name} must be a whole number from 1, not {raw[:40]!r}.")
    if len(digits) > _MAX_DIGITS:
        if past_the_end:
            raise NotFound("Invalid page: past the end of the list.")
        if maximum is None:
            raise invalid(name, f"{name} is too large.")
        return maximum
    number = int(digits)
    return min(number, maximum) if maximum is not None else number


class _PeekingPage(_PageBase):
    """A page that knows whether another follows from one extra row it fetched."""

    def __init__(self, rows: list[Any], number: int, paginator: _PaginatorBase,
                 has_more: bool) -> None:
        super().__init__(rows, number, paginator)
        self._has_more = has_more

    def has_next(self) -> bool:
        return self._has_more

    def next_page_number(self) -> int:
        return self.number + 1

    def previous_page_number(self) -> int:
        return self.number - 1


class _PeekingPaginator(_PaginatorBase):
    """Pages of ``per_page`` rows fetched with one row more: ``next`` and "past the end"
    come from the rows themselves, not from ``count`` (which may be an estimate)."""

    count_is_exact = True

    def page(self, number: Any) -> _PeekingPage:
        number = int(number)
        bottom = (number - 1) * self.per_page
        if number > 1 and self.count_is_known_exact() and bottom >= self.count:
            raise EmptyPage("past the end")  # known without reading a row
        rows = list(self.object_list[bottom:bottom + self.per_page + 1])
        if not rows and number > 1:
            raise EmptyPage("past the end")
        return _PeekingPage(rows[:self.per_page], number, self,
                            has_more=len(rows) > self.per_page)

    def count_is_known_exact(self) -> bool:
        """Whether ``count`` (computing it if need be) is exact."""
        self.count  # noqa: B018  (the bounded count sets count_is_exact)
        return self.count_is_exact


class BoundedPeekingPaginator(_PeekingPaginator, BoundedCountPaginator):
    """The runs list's pages: ``count`` exact up to 1,000, the database's estimate above."""


class ExactPeekingPaginator(_PeekingPaginator):
    """A run's steps, attempts or events: ``count`` is exact (one run's rows, by index)."""


def paginated_schema(schema: dict[str, Any], *, estimates: bool) -> dict[str, Any]:
    """The OpenAPI schema of ``{count, count_is_estimate, next, previous, results}``."""
    count_help = ("Exact up to 1,000; above, the database's estimate (see count_is_estimate)."
                  if estimates else "Exact.")
    return {
        "type": "object",
        "required": ["count", "count_is_estimate", "next", "previous", "results"],
        "properties": {
            "count": {"type": "integer", "example": 123, "description": count_help},
            "count_is_estimate": {
                "type": "boolean",
                "description": "True when count is the database's estimate (more than "
                               "1,000 runs match)." if estimates else "Always false here."},
            "next": {"type": "string", "nullable": True, "format": "uri",
                     "description": "The following page, null on the last."},
            "previous": {"type": "string", "nullable": True, "format": "uri",
                         "description": "The page before, null on the first."},
            "results": schema,
        },
    }


def _answer(count: int, exact: bool, next_link: str | None, previous_link: str | None,
            data: Any) -> Response:
    return Response(OrderedDict([
        ("count", count), ("count_is_estimate", not exact), ("next", next_link),
        ("previous", previous_link), ("results", data),
    ]))


class PagePagination(PageNumberPagination):
    """``?page=&page_size=`` checked (400 on anything but a whole number from 1), 404
    past the end, and ``count_is_estimate`` in the answer."""

    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    last_page_strings = ()
    django_paginator_class: type[_PeekingPaginator] = ExactPeekingPaginator
    #: The query parameters this pagination reads (the views refuse any other).
    query_parameters: tuple[str, ...] = ("page", "page_size")
    count_estimates = False

    def get_page_size(self, request: Request) -> int:
        return whole_number(request, "page_size", default=self.page_size,
                            maximum=self.max_page_size)

    def paginate_queryset(self, queryset: Any, request: Request,
                          view: APIView | None = None) -> list[Any]:
        self.request = request
        page_size = self.get_page_size(request)
        number = whole_number(request, "page", default=1, past_the_end=True)
        paginator = self.django_paginator_class(queryset, page_size)
        try:
            self.page = paginator.page(number)
        except EmptyPage:
            raise NotFound(f"Invalid page: page {number} is past the end of the list.") \
                from None
        return list(self.page)

    def get_paginated_response(self, data: Any) -> Response:
        assert self.page is not None
        paginator = self.page.paginator
        count = paginator.count  # first: a bounded count sets count_is_exact
        return _answer(count, getattr(paginator, "count_is_exact", True),
                       self.get_next_link(), self.get_previous_link(), data)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return paginated_schema(schema, estimates=self.count_estimates)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {"name": "page", "required": False, "in": "query",
             "description": "A page number, from 1 (past the end: 404).",
             "schema": {"type": "integer", "minimum": 1}},
            {"name": "page_size", "required": False, "in": "query",
             "description": f"Rows per page, from 1 (default {PAGE_SIZE}; above "
                          f"{MAX_PAGE_SIZE}: {MAX_PAGE_SIZE}).",
             "schema": {"type": "integer", "minimum": 1}},
        ]


class RunPartPagination(PagePagination):
    """A run's steps, attempts or timeline events: page numbers, exact counts."""


class RunPagePagination(PagePagination):
    """The runs list by page number: counts bounded at 1,000 (``pikku_workflows.paging``)."""

    django_paginator_class = BoundedPeekingPaginator
    count_estimates = True


class RunCursorPagination(CursorPagination):
    """The runs list by cursor: newest first, ordered by ``created_at`` then ``id``.

    The cursor holds the position (a ``created_at``) of the page's edge: a run started
    after the first page was read sorts before it, so it never pushes runs from one page
    into the next. The answer has the same keys as a page's (``count`` included).
    """

    ordering = ("-created_at", "-id")
    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    template = None

    def get_page_size(self, request: Request) -> int:
        return whole_number(request, "page_size", default=self.page_size,
                            maximum=self.max_page_size)

    def decode_cursor(self, request: Request) -> Any:
        encoded = request.query_params.get(self.cursor_query_param, "")
        if not encoded:
            return None
        refused = invalid("cursor", "cursor is not one this API gave (take it from next or "
                                    "previous).")
        # DRF reads any text as some cursor (an empty one for "not a cursor") and hands
        # its position to the database as it is: a position it cannot compare is a 500.
        try:
            tokens = parse_qs(b64decode(encoded.encode("ascii"), validate=True).decode(
                "ascii"), keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise refused from None
        if not tokens or set(tokens) - {"o", "r", "p"} or \
                any(len(values) != 1 for values in tokens.values()):
            raise refused
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise refused from None
        if cursor is not None and cursor.position is not None:
            try:
                moment = parse_datetime(str(cursor.position)[:64])
                if moment is None:
                    raise ValueError(cursor.position)
                position = checked_datetime(moment)  # as created_after is checked
            except ValueError:
                raise refused from None
            # (DRF's stubs say positions are numbers: here they are times, as text.)
            cursor = cursor._replace(position=position.isoformat())  # type: ignore[arg-type]
        return cursor

    def paginate_queryset(self, queryset: Any, request: Request,
                          view: APIView | None = None) -> list[Any] | None:
        self._queryset = queryset
        return super().paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data: Any) -> Response:
        count, exact = bounded_count(self._queryset)
        return _answer(count, exact, self.get_next_link(), self.get_previous_link(), data)

    def _get_position_from_instance(self, instance: Any, ordering: Any) -> str:
        value = instance["created_at"] if isinstance(instance, dict) else instance.created_at
        return str(value.astimezone(UTC).isoformat() if timezone.is_aware(value)
                   else value.isoformat())


class RunPagination(BasePagination):
    """The runs list: by page number (the default) or, with ``?paginate=cursor`` or a
    ``cursor``, by cursor. Both answer ``{count, count_is_estimate, next, previous,
    results}``."""

    query_parameters: tuple[str, ...] = ("page", "page_size", "paginate", "cursor")

    def __init__(self) -> None:
        self.mode: PagePagination | RunCursorPagination = RunPagePagination()

    def paginate_queryset(self, queryset: Any, request: Request,
                          view: APIView | None = None) -> list[Any] | None:
        paginate = request.query_params.get("paginate", "")
        if paginate not in ("", "page", "cursor"):
            raise invalid("paginate", f"paginate is page (the default) or cursor, not "
                                         f"{paginate[:40]!r}.")
        by_cursor = paginate == "cursor" or bool(request.query_params.get("cursor"))
        if by_cursor and request.query_params.get("page"):
            raise invalid("page", "page is for page numbers; with a cursor, follow next "
                                     "and previous.")
        if request.query_params.get("cursor") and paginate == "page":
            raise invalid("cursor", "cursor is for paginate=cursor.")
        self.mode = RunCursorPagination() if by_cursor else RunPagePagination()
        return self.mode.paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data: Any) -> Response:
        return self.mode.get_paginated_response(data)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return paginated_schema(schema, estimates=True)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [*RunPagePagination().get_schema_operation_parameters(view), {
            "name": "paginate", "required": False, "in": "query",
            "description": "page (the default): by page number; cursor: by a cursor, "
                           "stable while runs are being started (follow next).",
            "schema": {"type": "string", "enum": ["page", "cursor"]},
        }, {
            "name": "cursor", "required": False, "in": "query",
            "description": "Where a cursor page starts: take it from next or previous.",
            "schema": {"type": "string"},
        }]
