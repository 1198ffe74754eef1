"""The runs lists' counts of runs waiting for an event or a message read a partial index
each (they read every suspended run before). Built ``CONCURRENTLY`` on PostgreSQL."""

from __future__ import annotations

from django.db import migrations, models

from ._concurrent_indexes import add_indexes_concurrently

WAITING_FOR_EVENT = models.Index(
    condition=models.Q(("error__code", "WAITING_FOR_EVENT"), ("status", "suspended")),
    fields=["-created_at"], name="pikku_run_waiting_for_event")
WAITING_FOR_MESSAGE = models.Index(
    condition=models.Q(("error__code", "WAITING_FOR_MESSAGE"), ("status", "suspended")),
    fields=["-created_at"], name="pikku_run_waiting_for_message")


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("pikku_workflows", "0020_dashboard_indexes"),
    ]

    operations = [
        add_indexes_concurrently((("WorkflowRun", WAITING_FOR_EVENT),
                                  ("WorkflowRun", WAITING_FOR_MESSAGE))),
    ]
