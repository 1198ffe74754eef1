"""Named step limits across real ``pikku_worker`` processes: never more than the
concurrency at once, never more than the rate in any window (a ledger of start and end
times written by the steps), and a SIGKILLed worker's slot freed by its lease.

Sized for CI (``PIKKU_LIMITS_STEPS``, default 200 steps); ``make soak`` runs them at the
issue's size (500).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.conf import pikku_settings
from pikku_workflows.models import WorkflowLimitSlot, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.services import wait_for
from tests.settings import TEST_LIMITS

STEPS = int(os.environ.get("PIKKU_LIMITS_STEPS", "200"))
CONCURRENCY = TEST_LIMITS["fault_api"]["concurrency"]
RATE, PERIOD_NS = 20, 1_000_000_000  # "20/s"
assert TEST_LIMITS["fault_rate"]["rate"] == "20/s"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch) -> Path:
    path = tmp_path / "ledger"
    path.touch()
    monkeypatch.setenv("PIKKU_LIMITS_LEDGER", str(path))  # the workers inherit it
    return path


def _entries(path: Path, kind: str) -> list[tuple[int, int, int]]:
    rows = []
    for line in path.read_text().splitlines():
        what, n, started, ended = line.split()
        if what == kind:
            rows.append((int(n), int(started), int(ended)))
    return rows


def _most_at_once(entries: list[tuple[int, int, int]]) -> int:
    events = sorted([(start, 1) for _, start, _ in entries] + [(end, -1) for _, _, end in entries],
                    key=lambda event: (event[0], event[1]))  # an end before a start at a tie
    most = current = 0
    for _, change in events:
        current += change
        most = max(most, current)
    return most


def _most_starts_in_a_window(starts: list[int], window: int) -> int:
    starts = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def _finish(run: WorkflowRun, workers, timeout: float) -> WorkflowRun:
    try:
        wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).status in RunStatus.terminal(),
                 timeout=timeout, interval=0.2)
    except AssertionError:
        raise AssertionError(workers.output()[-3000:]) from None
    return WorkflowRun.objects.get(pk=run.pk)


def test_never_more_than_the_concurrency_at_once(workers, ledger):
    workers.start(2, "--workers", "3", expect=6)  # six takers for three slots
    run = pw.start_workflow("fault_limit_fan_out", {"steps": STEPS, "hold": 0.02},
                            inline=False)
    finished = _finish(run, workers, timeout=240)
    assert (finished.status, finished.output) == (RunStatus.COMPLETED, STEPS)
    entries = _entries(ledger, "c")
    assert sorted(n for n, _, _ in entries) == list(range(STEPS))  # each step once
    assert _most_at_once(entries) == CONCURRENCY  # the limit bound, and was reached
    # Steps waited (scheduled, no worker held) and none is left waiting.
    assert not WorkflowStep.objects.filter(run=run).exclude(
        status=StepStatus.SUCCEEDED).exists()


def test_never_more_than_the_rate_in_any_window(workers, ledger):
    workers.start(2, "--workers", "2", expect=4)
    run = pw.start_workflow("fault_limit_fan_out", {"steps": STEPS, "rate": True},
                            inline=False)
    finished = _finish(run, workers, timeout=240)
    assert (finished.status, finished.output) == (RunStatus.COMPLETED, STEPS)
    starts = [start for _, start, _ in _entries(ledger, "r")]
    assert len(starts) == STEPS
    # At most 20 starts in any one-second window (+1: a start is stamped by the step,
    # a moment after its slot was taken).
    assert _most_starts_in_a_window(starts, PERIOD_NS) <= RATE + 1
    # The steps took more than the rate's minimum time: they did wait for it.
    assert max(starts) - min(starts) >= (STEPS // RATE - 1) * PERIOD_NS


def test_a_killed_worker_s_slots_free_themselves_within_the_lease(workers, ledger):
    lease = pikku_settings.LEASE_TIMEOUT  # the workers' (tests.services.SETTINGS)
    [first] = workers.start(1, "--workers", "3", expect=3)
    holders = pw.start_workflow("fault_limit_fan_out", {"steps": CONCURRENCY, "hold": 600},
                                inline=False)
    # Running, and holding their slots (a step is running a moment before its take).
    wait_for(lambda: WorkflowStep.objects.filter(
        run=holders, status=StepStatus.RUNNING).count() == CONCURRENCY
        and WorkflowLimitSlot.objects.filter(name="fault_api", kind="c",
                                             until__gt=timezone.now()).count() == CONCURRENCY,
        timeout=60)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = time.time()
    held = list(WorkflowLimitSlot.objects.filter(name="fault_api", kind="c",
                                                 until__gt=timezone.now()))
    assert len(held) == CONCURRENCY
    # Nobody renews them any more: each lease ends within LEASE_TIMEOUT of the kill.
    assert all(slot.until.timestamp() <= killed_at + lease for slot in held)
    workers.start(1, "--workers", "3", expect=3)
    probe = pw.start_workflow("fault_limit_fan_out", {"steps": 1}, inline=False)
    finished = _finish(probe, workers, timeout=60)
    assert finished.status == RunStatus.COMPLETED
    [(_, started, _)] = _entries(ledger, "c")
    # It ran on a slot freed by its lease's end, not before.
    assert started / 1e9 >= min(slot.until.timestamp() for slot in held) - 0.5
    assert WorkflowStep.objects.get(run=probe).attempt_count == 1
    # The killed attempts were found lost (the sweep), their run failed (retries=0).
    assert _finish(holders, workers, timeout=60).status == RunStatus.FAILED
