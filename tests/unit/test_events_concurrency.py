"""Idempotent sends under real concurrency: 8 processes send the same idempotency key at
the same moment (on SQLite's file database and on PostgreSQL, whichever the suite runs on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.models import WorkflowEvent, WorkflowMessage

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8

SENDER = """
import json, os, time
from pathlib import Path
import pikku_workflows as pw
gate = Path(os.environ["EV_GATE"])
(gate / f"ready-{os.getpid()}").touch()
while not (gate / "go").exists():
    time.sleep(0.005)
event = pw.send_event("paid", {"n": 1}, key="order-1", idempotency_key="same-key")
message = pw.send(os.environ["EV_RUN"], {"m": 1}, idempotency_key="same-key")
print(json.dumps([event.id, event.created, message.id, message.created]))
"""


@pytest.mark.django_db(transaction=True)
def test_eight_processes_sending_the_same_key_at_once_store_one_row(tmp_path):
    if connection.vendor == "sqlite":
        assert connection.settings_dict["NAME"] != ":memory:"  # a file the processes share
    run = pw.start_workflow("ev_recv", {"count": 2})
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "PIKKU_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
           "PYTHONPATH": str(ROOT), "EV_GATE": str(tmp_path), "EV_RUN": str(run.pk)}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "shell", "-c", SENDER],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(PROCESSES)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < PROCESSES:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "the senders did not start"
        time.sleep(0.05)
    (tmp_path / "go").touch()  # all at once
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    event_ids = {r[0] for r in results}
    message_ids = {r[2] for r in results}
    assert len(event_ids) == 1 and len(message_ids) == 1
    assert sorted(r[1] for r in results) == [False] * (PROCESSES - 1) + [True]
    assert sorted(r[3] for r in results) == [False] * (PROCESSES - 1) + [True]
    assert WorkflowEvent.objects.filter(idempotency_key="same-key").count() == 1
    assert WorkflowMessage.objects.filter(run=run, idempotency_key="same-key").count() == 1
    run.refresh_from_db()
    assert run.status == "suspended"  # one message delivered, the second recv still waits
    assert run.messages.get().received_by == "Get"
