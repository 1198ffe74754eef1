"""Limits and bad values at the edges of the commands: clear errors, nothing written."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

ROOT = Path(__file__).resolve().parents[2]


def test_pikku_prune_names_the_statuses_it_accepts():
    """argparse used to list the enum members' reprs (RunStatus.CANCELLED, ...)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "pikku_prune", "--older-than", "30d", "--status", "bogus"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2
    assert "invalid choice: 'bogus' (choose from 'cancelled', 'completed', 'failed')" in done.stderr


@pytest.mark.django_db
def test_pikku_prune_keeps_a_finished_parent_whose_child_still_runs():
    """Deleting the parent used to delete its live child with it."""
    parent = pw.start_workflow("parent", {"child": "child_suspends", "child_input": {}})
    child = WorkflowRun.objects.get(parent_run=parent)
    long_ago = timezone.now() - timedelta(days=40)
    WorkflowRun.objects.filter(pk=parent.pk).update(status="failed", finished_at=long_ago)
    done = pw.start_workflow("sequential", {"x": 1})
    WorkflowRun.objects.filter(pk=done.pk).update(finished_at=long_ago)
    call_command("pikku_prune", "--older-than", "30d", stdout=StringIO())
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {parent.pk, child.pk}
