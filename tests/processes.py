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
