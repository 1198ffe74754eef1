"""Shared admin behaviour: read-only rows, staff-only viewing, history refused before lookup."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

if TYPE_CHECKING:
    # The mixin always precedes a ModelAdmin (of any model); only the type checker sees it.
    _AdminBase = admin.ModelAdmin[Any]
else:
    _AdminBase = object


class ReadOnlyAdminMixin(_AdminBase):
    """Every field read-only; no add, change or delete through forms; list queries
    holding NUL refused like any invalid lookup."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, object] | None = None) -> HttpResponse:
        if any("\x00" in key or any("\x00" in value for value in values)
               for key, values in request.GET.lists()):
            # No text column holds NUL (PostgreSQL refuses it with a DataError): the
            # admin's own answer to an invalid lookup.
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        return super().changelist_view(request, extra_context)


class HistoryGuardMixin(_AdminBase):
    """The history page refused before its object is looked up.

    Django's view redirects for an unknown id first, which would tell staff without the
    permission which ids exist.
    """

    def history_view(self, request: HttpRequest, object_id: str,
                     extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return super().history_view(request, object_id, extra_context)


class StaffViewMixin(HistoryGuardMixin):
    """Seen by active staff holding ``view_permission``; the module shown to them alone."""

    view_permission: str

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        user = request.user
        return user.is_active and user.is_staff and user.has_perm(self.view_permission)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)
