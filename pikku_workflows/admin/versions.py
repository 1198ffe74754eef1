"""Admin pages for workflow versions."""

from __future__ import annotations

from django.contrib import admin

from .mixins import ReadOnlyAdminMixin


class WorkflowVersionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("workflow", "graph_hash", "source", "status", "created_at")
    list_filter = ("source", "status", "workflow")
    search_fields = ("workflow", "graph_hash")
    readonly_fields = ("workflow", "graph_hash", "source", "status", "graph", "created_at")
