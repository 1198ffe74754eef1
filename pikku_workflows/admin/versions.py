"""Admin pages for workflow versions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin

from ..models import WorkflowVersion
from .mixins import ReadOnlyAdminMixin

if TYPE_CHECKING:
    # Django's ModelAdmin takes no type argument at run time.
    _VersionAdminBase = admin.ModelAdmin[WorkflowVersion]
else:
    _VersionAdminBase = admin.ModelAdmin


class WorkflowVersionAdmin(ReadOnlyAdminMixin, _VersionAdminBase):
    list_display = ("workflow", "graph_hash", "source", "status", "created_at")
    list_filter = ("source", "status", "workflow")
    search_fields = ("workflow", "graph_hash")
    readonly_fields = ("workflow", "graph_hash", "source", "status", "graph", "created_at")
