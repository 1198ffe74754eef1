"""Concurrency slots and debounce windows under real concurrency: 8 processes start at the
same moment (on SQLite's file database and on PostgreSQL, whichever the suite runs on).
Two starts at once never both take the last slot; one debounce key makes one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from pikku_workflows.models import WorkflowRun

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8

STARTER = """
import json, os, time
from pathlib import Path
import pikku_workflows as pw
gate = Path(os.environ["FLOW_GATE"])
(gate / f"ready-{os.getpid()}").touch()
while not (gate / "go").exists():
    time.sleep(0.005)
slot = pw.start_workflow("flow_two_slots", os.getpid(), inline=True)
window = pw.start_workflow("flow_echo", os.getpid(), inline=True,
                           debounce=pw.Debounce("same-doc", period="1h"))
print(json.dumps([str(slot.pk), slot.status, str(window.pk)]))
"""


@pytest.mark.django_db(transaction=True)
def test_eight_processes_starting_at_once_take_two_slots_and_one_window(tmp_path):
    if connection.vendor == "sqlite":
        assert connection.settings_dict["NAME"] != ":memory:"  # a file the processes share
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "PIKKU_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
           "PYTHONPATH": str(ROOT), "FLOW_GATE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "shell", "-c",
                               STARTER], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < PROCESSES:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "the starters did not start"
        time.sleep(0.05)
    (tmp_path / "go").touch()  # all at once
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(status for _, status, _ in results) == ["scheduled"] * 6 + ["suspended"] * 2
    runs = WorkflowRun.objects.filter(workflow="flow_two_slots")
    assert runs.filter(status="suspended").count() == 2
    assert runs.filter(status="scheduled", waiting_for="concurrency").count() == 6
    assert len({window for _, _, window in results}) == 1
    window = WorkflowRun.objects.get(workflow="flow_echo")
    assert window.wire["debounce"]["starts"] == PROCESSES
