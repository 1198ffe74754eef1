"""The waiting triage lists' counts are answered from their partial indexes."""

from __future__ import annotations

import pytest
from django.db import connection

from pikku_workflows.admin.actions import WAITING_FOR
from pikku_workflows.models import WorkflowRun


@pytest.mark.postgres_only
@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["event", "message"])
def test_each_waiting_list_can_use_its_own_index(kind):
    """The index's condition must be implied by the list's (a code written differently in
    one of them makes the index unusable and each count reads every suspended run)."""
    with connection.cursor() as cursor:
        # Tiny test tables are always scanned: forbid the scan to learn whether the
        # index applies at all.
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = WorkflowRun.objects.filter(WAITING_FOR[kind]).explain()
    assert f"pikku_run_waiting_for_{kind}" in plan
