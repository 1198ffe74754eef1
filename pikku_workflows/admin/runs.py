"""Admin pages for workflow runs, with their steps."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.utils.html import format_html

from ..models import WorkflowRun, WorkflowStep
from .mixins import ReadOnlyAdminMixin


def pretty_json(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


class WorkflowStepInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = WorkflowStep
    fk_name = "run"
    extra = 0
    fields = ("step_name", "status", "rpc_name", "attempt_count", "retries", "error_message",
              "updated_at")
    readonly_fields = fields
    ordering = ("id",)

    @admin.display(description="error")
    def error_message(self, step: WorkflowStep) -> str:
        return (step.error or {}).get("message", "")


class WorkflowRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "workflow", "status", "graph_hash", "owner", "created_at",
                    "finished_at")
    list_filter = ("status", "workflow", "created_at")
    search_fields = ("=id", "workflow")
    date_hierarchy = "created_at"
    show_full_result_count = False
    list_select_related = ("owner",)
    inlines = [WorkflowStepInline]
    fields = ("id", "workflow", "status", "graph_hash", "inline", "owner", "parent_run",
              "created_at", "updated_at", "finished_at", "input_json", "output_json",
              "error_json", "state_json")
    readonly_fields = fields

    @admin.display(description="input")
    def input_json(self, run: WorkflowRun) -> str:
        return pretty_json(run.input)

    @admin.display(description="output")
    def output_json(self, run: WorkflowRun) -> str:
        return pretty_json(run.output)

    @admin.display(description="error")
    def error_json(self, run: WorkflowRun) -> str:
        return pretty_json(run.error)

    @admin.display(description="state")
    def state_json(self, run: WorkflowRun) -> str:
        return pretty_json(run.state)
