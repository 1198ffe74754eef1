"""The dashboard's indexes (runs finished in a window, failed attempts by time) and its
admin entry. The indexes are built ``CONCURRENTLY`` on PostgreSQL (hence not atomic), so
that an upgrade does not lock a table of millions of runs against writes while it builds."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

RUN_FINISHED = models.Index(
    condition=models.Q(("finished_at__isnull", False)),
    fields=["finished_at", "status", "workflow", "created_at"], name="pikku_run_finished")
ATTEMPT_FAILED = models.Index(
    condition=models.Q(("failed_at__isnull", False)), fields=["failed_at"],
    name="pikku_attempt_failed")
INDEXES = (("WorkflowRun", RUN_FINISHED), ("StepAttempt", ATTEMPT_FAILED))


def create(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for model_name, index in INDEXES:
        model = apps.get_model("pikku_workflows", model_name)
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.add_index(model, index, concurrently=True)  # type: ignore[call-arg]
        else:
            schema_editor.add_index(model, index)


def drop(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for model_name, index in INDEXES:
        model = apps.get_model("pikku_workflows", model_name)
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.remove_index(model, index, concurrently=True)  # type: ignore[call-arg]
        else:
            schema_editor.remove_index(model, index)


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
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(model_name="workflowrun", index=RUN_FINISHED),
                migrations.AddIndex(model_name="stepattempt", index=ATTEMPT_FAILED),
            ],
            database_operations=[migrations.RunPython(create, drop, elidable=False)],
        ),
    ]
