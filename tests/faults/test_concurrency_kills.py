"""Workflow concurrency under SIGKILLs (DESIGN 8.4): runs over keys with ``max=1`` on two
``pikku_worker`` processes, one killed every couple of seconds and restarted. A ledger
file of start and end times written by the steps shows that no two runs of one key ever
ran at once, that every run completed, and that none starved (each queued run of a key
started within a bound after its predecessor ended).

CI size: 200 runs over 20 keys (about a minute). ``PIKKU_FLOW_SOAK=1`` (set by
``make soak``) runs the issue's full size: 1,000 runs over 100 keys.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import defaultdict
from itertools import pairwise

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus
from tests.services import SETTINGS, wait_for

SOAK = os.environ.get("PIKKU_FLOW_SOAK") == "1"
RUNS, KEYS = (1000, 100) if SOAK else (200, 20)
#: The longest a queued run may wait after its predecessor's end: a kill between the two
#: leaves the start to the time keeper's next pass, a kill inside a step to the lease's
#: expiry (LEASE_TIMEOUT 2 s) and the recovery sweep (every second).
STARVE_BOUND = 15.0


def read_ledger(path):
    """{run: [start, end or None]} per key, from the ledger's S and E lines (a killed
    attempt leaves an S without its E; the retry writes both)."""
    runs: dict[str, dict[int, list]] = defaultdict(dict)
    with open(path, encoding="utf-8") as ledger:
        for line in ledger:
            mark, key, n, at, _pid = line.split()
            spans = runs[key].setdefault(int(n), [])
            if mark == "S":
                spans.append([float(at), None])
            else:
                spans[-1][1] = float(at)
    return runs


def describe(n, ids):
    """A starved run's history, for the failure message."""
    from pikku_workflows.models import StepAttempt

    run = WorkflowRun.objects.get(pk=ids[n])
    attempts = list(StepAttempt.objects.filter(step__run=run).values_list(
        "attempt", "status", "created_at", "error"))
    return {"created": run.created_at.timestamp(), "updated": run.updated_at.timestamp(),
            "finished": run.finished_at.timestamp() if run.finished_at else None,
            "attempts": [(a, s, c.timestamp(), (e or {}).get("type")) for a, s, c, e
                         in attempts]}


def test_one_run_per_key_at_a_time_through_sigkills(workers, tmp_path):
    assert SETTINGS["LEASE_TIMEOUT"] == "2s"  # the starvation bound counts on it
    rng = random.Random(29)
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    workers.start(2, "--scheduler-interval", "0.2")
    order = [(f"k{index % KEYS}", index) for index in range(RUNS)]
    created = [pw.start_workflow("fault_keyed", {"key": key, "n": n, "ledger": str(ledger)},
                                 inline=False) for key, n in order]
    ids = [run.pk for run in created]
    first_status = {n: run.status for n, run in enumerate(created)}
    runs = WorkflowRun.objects.filter(pk__in=ids)
    kills = 0
    deadline = time.monotonic() + (900 if SOAK else 120)
    while runs.exclude(status=RunStatus.COMPLETED).exists() and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.5, 1.5))
        victims = [p for p in workers.procs if p.poll() is None]
        workers.kill(rng.choice(victims), signal.SIGKILL)
        kills += 1
        workers.start(1, "--scheduler-interval", "0.2")
    wait_for(lambda: not runs.exclude(status=RunStatus.COMPLETED).exists(), timeout=60)

    spans = read_ledger(ledger)
    assert sorted(spans) == sorted({key for key, _ in order})
    for key, by_run in spans.items():
        assert sorted(by_run) == sorted(n for k, n in order if k == key)
        # Every run ended: its last attempt wrote both its start and its end.
        assert all(attempts[-1][1] is not None for attempts in by_run.values()), key
        lives = sorted((attempts[0][0], attempts[-1][1], n)
                       for n, attempts in by_run.items())
        for (_, ended, before), (began, _, after) in pairwise(lives):
            # Never two runs of a key at once.
            assert began >= ended, f"key {key}: run {after} began before {before} ended"
            # None starved.
            assert began - ended < STARVE_BOUND, (key, before, after, began - ended,
                                                  first_status[after], describe(after, ids))
    assert kills >= 5
    # Holders and queues are empty: nothing left waiting for a slot.
    assert not WorkflowRun.objects.filter(waiting_for="concurrency",
                                          status=RunStatus.SCHEDULED).exists()
