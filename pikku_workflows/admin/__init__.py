"""The Django admin as the operations console: runs, triage lists, run pages, workflows,
schedules, events, limits, the dashboard."""

from __future__ import annotations

from django.contrib import admin

from ..models import (
    ApprovalWaitingRun,
    FailedRun,
    RegisteredWorkflow,
    RunDashboard,
    SuspendedRun,
    WorkflowEvent,
    WorkflowLimit,
    WorkflowRun,
    WorkflowSchedule,
    WorkflowVersion,
)
from .dashboard import RunDashboardAdmin
from .events import WorkflowEventAdmin
from .limits import WorkflowLimitAdmin
from .runs import ApprovalWaitingRunAdmin, FailedRunAdmin, SuspendedRunAdmin, WorkflowRunAdmin
from .schedules import WorkflowScheduleAdmin
from .versions import WorkflowVersionAdmin
from .workflows import RegisteredWorkflowAdmin

admin.site.register(WorkflowRun, WorkflowRunAdmin)
admin.site.register(FailedRun, FailedRunAdmin)
admin.site.register(SuspendedRun, SuspendedRunAdmin)
admin.site.register(ApprovalWaitingRun, ApprovalWaitingRunAdmin)
admin.site.register(RegisteredWorkflow, RegisteredWorkflowAdmin)
admin.site.register(WorkflowVersion, WorkflowVersionAdmin)
admin.site.register(WorkflowSchedule, WorkflowScheduleAdmin)
admin.site.register(WorkflowEvent, WorkflowEventAdmin)
admin.site.register(WorkflowLimit, WorkflowLimitAdmin)
admin.site.register(RunDashboard, RunDashboardAdmin)
