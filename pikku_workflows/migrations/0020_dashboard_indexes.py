"""The dashboard's indexes (runs finished in a window, failed attempts by time) and its
admin entry. The indexes are built ``CONCURRENTLY`` on PostgreSQL (hence not atomic), so
that an upgrade does not lock a table of millions of runs against writes while it builds."""

from __future__ import annotations

from django.db import migrations, models

from ._concurrent_indexes import add_indexes_concurrently

RUN_FINISHED = models.Index(
    condition=models.Q(("finished_at__isnull", False)),
    fields=["finished_at", "status", "workflow", "created_at"], name="pikku_run_finished")
ATTEMPT_FAILED = models.Index(
    condition=models.Q(("failed_at__isnull", False)), fields=["failed_at"],
    name="pikku_attempt_failed")


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("pikku_workflows", "0019_trace_context"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunDashboard",
            fields=[
            ],
            options={
                "verbose_name": "dashboard",
                "verbose_name_plural": "dashboard",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("pikku_workflows.workflowrun",),
        ),
        add_indexes_concurrently((("WorkflowRun", RUN_FINISHED),
                                  ("StepAttempt", ATTEMPT_FAILED))),
    ]
