"""``manage.py pikku_scheduler``: the time keeper alone, for deployments without RQ workers."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...engine.versions import register_versions
from ...executors.worker import SweepThread
from ...runtime.scheduler import TimeKeeper, sync_schedules
from ..console_logging import log_to_console


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
        keeper = TimeKeeper(options["interval"], threads=options["threads"])
        sweeper = None
        if options["sweep_interval"] > 0:
            sweeper = SweepThread(options["sweep_interval"])
            sweeper.start()
        def stop(signum: int, frame: Any) -> None:
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
            keeper.stop()
