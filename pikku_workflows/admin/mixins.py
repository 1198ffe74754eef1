"""Read-only admin behaviour: rows are written by the engine, never by hand in a form."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """Every field read-only; no add, change or delete through forms."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
