"""The run's foreign keys to its parent, its fork source, the fork's author and its
schedule are NULL on most runs: each gets a partial index holding only the runs that have
one, in place of Django's full index. The owner's own index goes (``pikku_run_owner_created``
leads with the owner). A run's insert, and each change of its status, write five index
entries fewer. On PostgreSQL the indexes are built and dropped ``CONCURRENTLY``; no table
is rebuilt on SQLite (Django's ``AlterField`` would copy it)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

PARTIAL = ("parent_run", "forked_from", "forked_by", "schedule")
DROPPED = (*PARTIAL, "owner")


def partial_index(field: str) -> models.Index:
    return models.Index(condition=models.Q((f"{field}__isnull", False)), fields=[field],
                        name=f"pikku_run_{field}")


def _full_indexes(schema_editor: BaseDatabaseSchemaEditor, model: Any, column: str
                  ) -> list[str]:
    """The names of the plain one-column indexes of ``column`` (Django's, whatever their
    name), but the partial ones this migration adds."""
    added = {partial_index(field).name for field in PARTIAL}
    with schema_editor.connection.cursor() as cursor:
        constraints = schema_editor.connection.introspection.get_constraints(
            cursor, model._meta.db_table)
    return [name for name, info in constraints.items()
            if info["index"] and not info["unique"] and not info["primary_key"]
            and info["columns"] == [column] and name not in added]


def forwards(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    model = apps.get_model("pikku_workflows", "WorkflowRun")
    concurrently = schema_editor.connection.vendor == "postgresql"
    options = {"concurrently": True} if concurrently else {}
    for field in PARTIAL:  # the new indexes first: the foreign keys are never unindexed
        schema_editor.add_index(model, partial_index(field), **options)
    for field in DROPPED:
        column = model._meta.get_field(field).column
        for name in _full_indexes(schema_editor, model, column):
            schema_editor.execute(
                f"DROP INDEX {'CONCURRENTLY ' if concurrently else ''}IF EXISTS "
                f"{schema_editor.quote_name(name)}")


def backwards(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    model = apps.get_model("pikku_workflows", "WorkflowRun")
    options = {"concurrently": True} if schema_editor.connection.vendor == "postgresql" \
        else {}
    for field in DROPPED:
        column = model._meta.get_field(field).column
        # The name Django gives a foreign key's index (as before this migration).
        name = schema_editor._create_index_name(  # type: ignore[attr-defined]
            model._meta.db_table, [column], suffix="")
        schema_editor.add_index(model, models.Index(fields=[field], name=name), **options)
    for field in PARTIAL:
        schema_editor.remove_index(model, partial_index(field), **options)


#: The foreign keys this migration leaves without Django's index, as their fields are now:
#: (name, model, on_delete, related_name); the verbose name is the name in words.
FOREIGN_KEYS = (
    ("forked_by", settings.AUTH_USER_MODEL, django.db.models.deletion.SET_NULL, "+"),
    ("forked_from", "pikku_workflows.workflowrun", django.db.models.deletion.SET_NULL,
     "forks"),
    ("owner", settings.AUTH_USER_MODEL, django.db.models.deletion.SET_NULL, "+"),
    ("parent_run", "pikku_workflows.workflowrun", django.db.models.deletion.CASCADE,
     "child_runs"),
    ("schedule", "pikku_workflows.workflowschedule", django.db.models.deletion.SET_NULL,
     "runs"),
)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("pikku_workflows", "0021_wait_list_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                *(migrations.AlterField(
                    model_name="workflowrun", name=name,
                    field=models.ForeignKey(
                        blank=True, db_index=False, null=True, on_delete=on_delete,
                        related_name=related_name, to=to,
                        verbose_name=name.replace("_", " ")))
                  for name, to, on_delete, related_name in FOREIGN_KEYS),
                *(migrations.AddIndex(model_name="workflowrun", index=partial_index(field))
                  for field in PARTIAL),
            ],
            database_operations=[
                migrations.RunPython(forwards, backwards, elidable=False),
            ],
        ),
    ]
