"""Worker subprocesses for the tests and the benchmarks: ``pikku_worker`` (or plain RQ)
processes, each leading a process group of its own, stopped whole."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def redis_connection() -> Any:
    from pikku_workflows.executors.rq import connection

    return connection()


def wait_until(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.02,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it is truthy; raise ``TimeoutError`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(interval)


class WorkerProcesses:
    """Worker subprocesses, each leading a process group of its own (its forked RQ
    scheduler in it), with their stderr kept for when they fail. Subclasses say how to
    start one (``env``); the benchmarks' pool and the tests' ``Workers`` share the rest."""

    #: Seconds a worker gets to stop after SIGTERM before it is killed.
    stop_timeout = 15.0

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        # The workers' stderr, shown when they fail; closed by ``close``.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def spawn(self, argv: list[str], count: int, *, expect: int | None = None,
              timeout: float = 60) -> list[subprocess.Popen]:
        """Start ``count`` processes running ``argv``; wait until ``expect`` (default
        ``count``) RQ workers of theirs have registered."""
        from rq import Worker

        env = self.env()
        started = [subprocess.Popen(argv, env=env, cwd=ROOT, start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=self.log)
                   for _ in range(count)]
        self.procs += started
        groups = {proc.pid for proc in started}  # each one leads its process group

        def registered() -> int:
            # Counted by process group, not in total: killed workers' registrations
            # linger, or get cleaned up meanwhile.
            return sum(1 for worker in Worker.all(connection=redis_connection())
                       if _process_group(worker.pid) in groups)

        try:
            wait_until(lambda: registered() >= (expect or count), timeout=timeout,
                       interval=0.05, what="worker registration")
        except TimeoutError as exc:
            raise RuntimeError(f"workers did not start: {self.output()[-3000:]}") from exc
        return started

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal a worker's whole process group and wait for the worker to end."""
        os.killpg(proc.pid, sig)
        proc.wait(timeout=10)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop_all(self) -> None:
        """Stop every worker's process group (the RQ scheduler child too)."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # A worker's forked scheduler may outlive it for a moment.
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def close(self) -> None:
        self.stop_all()
        self.log.close()


def _process_group(pid: int | None) -> int | None:
    try:
        return os.getpgid(pid) if pid else None
    except ProcessLookupError:
        return None


#: What ``all_at_once`` runs before each script: wait at the gate until every process is
#: ready, so that the scripts' work starts at the same moment.
_GATE = """
import json, os, time
from pathlib import Path
import pikku_workflows as pw
gate = Path(os.environ["PIKKU_GATE"])
(gate / f"ready-{os.getpid()}").touch()
while not (gate / "go").exists():
    time.sleep(0.005)
"""


def all_at_once(script: str, gate: Path, *, processes: int = 8,
                env: dict[str, str] | None = None) -> list[Any]:
    """Run ``script`` in ``processes`` Django shells on the test database, released at
    once; return what each printed last, as JSON (``pw``, ``json`` and ``os`` are
    imported for the script)."""
    import json
    import sys

    from django.db import connection

    root = Path(__file__).resolve().parents[1]
    if connection.vendor == "sqlite":
        assert connection.settings_dict["NAME"] != ":memory:"  # a file the processes share
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "PIKKU_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
           "PYTHONPATH": str(root), "PIKKU_GATE": str(gate), **(env or {})}
    procs = [subprocess.Popen([sys.executable, str(root / "manage.py"), "shell", "-c",
                               _GATE + script], env=env, cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    deadline = time.monotonic() + 120
    while len(list(gate.glob("ready-*"))) < processes:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.05)
    (gate / "go").touch()  # all at once
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
