"""The "waiting for approval" index takes the triage list's whole condition (the codes
too), and PostgreSQL gets statistics on the error's step and code: without them it
guessed ten runs at a gate out of a million and sorted the 100,000 there were (B9)."""

from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

TABLE = "pikku_workflows_workflowrun"


def create_statistics(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite keeps no statistics on JSON expressions
    schema_editor.execute(
        f"CREATE STATISTICS IF NOT EXISTS pikku_run_error_stats "
        f"ON (error ->> 'step'), (error -> 'code') FROM {TABLE}")
    schema_editor.execute(f"ANALYZE {TABLE}")


def drop_statistics(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP STATISTICS IF EXISTS pikku_run_error_stats")


class Migration(migrations.Migration):

    dependencies = [
        ('pikku_workflows', '0011_waiting_for_approval_code'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='workflowrun',
            name='pikku_run_awaiting_approval',
        ),
        migrations.AddIndex(
            model_name='workflowrun',
            index=models.Index(condition=models.Q(('error__code__in', ['WAITING_FOR_APPROVAL', 'WORKFLOW_SUSPENDED']), ('error__step__startswith', '__workflow_approval:'), ('status', 'suspended')), fields=['-created_at'], name='pikku_run_waiting_for_approval'),
        ),
        migrations.RunPython(create_statistics, drop_statistics, elidable=False),
    ]
