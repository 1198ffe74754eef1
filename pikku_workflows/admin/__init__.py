"""The Django admin as the operations console (read-only by default)."""

from __future__ import annotations

from django.contrib import admin

from ..models import WorkflowRun, WorkflowVersion
from .runs import WorkflowRunAdmin
from .versions import WorkflowVersionAdmin

admin.site.register(WorkflowRun, WorkflowRunAdmin)
admin.site.register(WorkflowVersion, WorkflowVersionAdmin)
