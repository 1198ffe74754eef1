"""Concurrency slots and debounce windows under real concurrency: 8 processes start at the
same moment (on SQLite's file database and on PostgreSQL, whichever the suite runs on).
Two starts at once never both take the last slot; one debounce key makes one run."""

from __future__ import annotations

import pytest

from pikku_workflows.models import WorkflowRun
from tests.processes import all_at_once

PROCESSES = 8

STARTER = """
slot = pw.start_workflow("flow_two_slots", os.getpid(), inline=True)
window = pw.start_workflow("flow_echo", os.getpid(), inline=True,
                           debounce=pw.Debounce("same-doc", period="1h"))
print(json.dumps([str(slot.pk), slot.status, str(window.pk)]))
"""


@pytest.mark.django_db(transaction=True)
def test_eight_processes_starting_at_once_take_two_slots_and_one_window(tmp_path):
    results = all_at_once(STARTER, tmp_path, processes=PROCESSES)
    assert sorted(status for _, status, _ in results) == ["scheduled"] * 6 + ["suspended"] * 2
    runs = WorkflowRun.objects.filter(workflow="flow_two_slots")
    assert runs.filter(status="suspended").count() == 2
    assert runs.filter(status="scheduled", waiting_for="concurrency").count() == 6
    assert len({window for _, _, window in results}) == 1
    window = WorkflowRun.objects.get(workflow="flow_echo")
    assert window.wire["debounce"]["starts"] == PROCESSES
