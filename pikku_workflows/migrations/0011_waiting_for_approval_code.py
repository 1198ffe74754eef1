"""Runs suspended at an approval gate say so: ``error.code`` ``WAITING_FOR_APPROVAL``.

Releases up to 0.1.0 stored ``WORKFLOW_SUSPENDED`` at approval gates too (the gate's key
in ``error.step`` told them apart). This rewrites the code of the runs waiting at a gate
now; the code still recognises the old form (``step_keys.approval_wait``), for a process
of the old release that suspends a run during a rolling deploy. Only the rows of the
partial index ``pikku_run_awaiting_approval`` are read, in batches.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations

GATE_PREFIX = "__workflow_approval:"
BATCH = 500


def _recode(apps: Any, schema_editor: Any, old: str, new: str) -> None:
    run_model = apps.get_model("pikku_workflows", "WorkflowRun")
    outbox = apps.get_model("pikku_workflows", "MirrorOutbox")
    mirrored = bool(getattr(settings, "PIKKU_WORKFLOWS", {}).get("MIRROR"))
    db = schema_editor.connection.alias
    waiting = run_model.objects.using(db).filter(
        status="suspended", error__step__startswith=GATE_PREFIX).order_by("pk")
    last = None
    while True:
        batch = waiting if last is None else waiting.filter(pk__gt=last)
        rows = list(batch.values_list("pk", "error")[:BATCH])
        if not rows:
            return
        last = rows[-1][0]
        for pk, error in rows:
            if isinstance(error, dict) and error.get("code") == old:
                # Guarded: a run that moved on since the read keeps what it wrote.
                changed = run_model.objects.using(db).filter(
                    pk=pk, status="suspended", error__code=old,
                    error__step=error.get("step")).update(error={**error, "code": new})
                if changed and mirrored:  # the MIRROR receives the run again, as after any change
                    outbox.objects.using(db).create(kind="run", key=str(pk))


def forwards(apps: Any, schema_editor: Any) -> None:
    _recode(apps, schema_editor, "WORKFLOW_SUSPENDED", "WAITING_FOR_APPROVAL")


def backwards(apps: Any, schema_editor: Any) -> None:
    _recode(apps, schema_editor, "WAITING_FOR_APPROVAL", "WORKFLOW_SUSPENDED")


class Migration(migrations.Migration):

    dependencies = [
        ("pikku_workflows", "0010_run_content_indexes"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
