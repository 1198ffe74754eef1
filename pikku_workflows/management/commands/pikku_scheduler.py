"""``manage.py pikku_scheduler``: the time keeper alone, for deployments without RQ workers."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from ...engine.clock import clock
from ...engine.dispatch import get_executor
from ...engine.versions import register_versions
from ...executors.worker import SweepThread
from ...models import WorkflowRun
from ...runtime.scheduler import TimeKeeper, start_run, sync_schedules
from ...types import RunId
from ..console_logging import log_to_console

#: How long a pool thread follows one inline run (its short sleeps included) before
#: leaving it to the recovery sweep, which continues it when its wake-up is due.
FOLLOW_SECONDS = 60.0


def _continue_inline(run_id: RunId) -> None:
    try:
        get_executor(True).enqueue_pass(run_id, deadline=clock().after(FOLLOW_SECONDS))
    except TimeoutError:
        pass  # waiting longer: the sweep wakes it when it is due
    finally:
        connection.close()


class Command(BaseCommand):
    help = ("Run the time keeper alone: schedule ticks, delayed starts and recovery sweeps; "
            "inline runs it starts continue on a small thread pool.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=0.5,
                            help="seconds between scheduler passes (default 0.5)")
        parser.add_argument("--threads", type=int, default=4,
                            help="threads that run inline runs (default 4)")
        parser.add_argument("--sweep-interval", type=float, default=5.0,
                            help="seconds between recovery sweeps (0: no sweeps)")

    def handle(self, *args: Any, **options: Any) -> None:
        log_to_console(options["verbosity"])
        register_versions()
        report = sync_schedules()
        self.stdout.write("schedules: " + ", ".join(
            f"{len(names)} {what}" for what, names in report.items()))
        pool = ThreadPoolExecutor(max_workers=max(options["threads"], 1),
                                  thread_name_prefix="pikku-inline")

        def start(run: WorkflowRun) -> None:
            if run.inline:
                pool.submit(_continue_inline, run.pk)
            else:
                start_run(run)

        keeper = TimeKeeper(options["interval"], start=start)
        sweeper = None
        if options["sweep_interval"] > 0:
            sweeper = SweepThread(options["sweep_interval"])
            sweeper.start()
        stopped = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            stopped.set()
            keeper.stop(timeout=0)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"pikku_scheduler: a pass every {options['interval']:g}s")
        self.stdout.flush()
        try:
            keeper.loop()
        finally:
            if sweeper is not None:
                sweeper.stop()
            pool.shutdown(wait=True, cancel_futures=False)
