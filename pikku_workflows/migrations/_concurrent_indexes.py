"""Indexes a migration builds ``CONCURRENTLY`` on PostgreSQL, so no upgrade locks a table.

Django's loader skips modules whose name starts with an underscore: this is no migration.
A migration using it sets ``atomic = False`` (PostgreSQL builds no index concurrently
inside a transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def add_indexes_concurrently(
        indexes: tuple[tuple[str, models.Index], ...]) -> migrations.SeparateDatabaseAndState:
    """The operation adding ``(model name, index)`` pairs: concurrently on PostgreSQL,
    plainly elsewhere; the migration state records ordinary ``AddIndex`` operations."""

    def change(add: bool) -> Callable[[Any, BaseDatabaseSchemaEditor], None]:
        def run(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
            edit = schema_editor.add_index if add else schema_editor.remove_index
            options = {"concurrently": True} if (
                schema_editor.connection.vendor == "postgresql") else {}
            for model_name, index in indexes:
                edit(apps.get_model("pikku_workflows", model_name), index, **options)
        return run

    return migrations.SeparateDatabaseAndState(
        state_operations=[migrations.AddIndex(model_name=model_name.lower(), index=index)
                          for model_name, index in indexes],
        database_operations=[migrations.RunPython(change(add=True), change(add=False),
                                                  elidable=False)],
    )
