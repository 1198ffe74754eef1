"""A SIGKILLed ``pikku_worker`` leaves no RQ scheduler child behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.services import wait_for


def children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux: /proc/<pid>/task/*/children)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            continue
    return {child for child in found if alive(child)}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_scheduler_child_dies_with_a_sigkilled_worker(workers):
    worker, = workers.start(1)
    scheduler, = wait_for(lambda: children(worker.pid), timeout=10)
    os.kill(worker.pid, signal.SIGKILL)   # the worker only, not its process group
    worker.wait(timeout=10)
    wait_for(lambda: not alive(scheduler), timeout=5)

