"""GIN ``jsonb_path_ops`` indexes on runs' input and output, for content search (``@>``),
on PostgreSQL only: SQLite has no such index and scans (docs/console.md). Built
``CONCURRENTLY`` (hence not atomic), so that an upgrade does not lock a table of millions
of runs against writes while it builds. Not in the model's ``Meta.indexes``: the index
would then be created on every database."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

INDEXES = {"pikku_run_input_gin": "input", "pikku_run_output_gin": "output"}
TABLE = "pikku_workflows_workflowrun"


def create(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, column in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {TABLE} "
            f"USING gin ({column} jsonb_path_ops)")


def drop(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("pikku_workflows", "0009_mirror_outbox"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
