"""``manage.py pikku_worker``: an RQ worker for workflow queues, with the time keeper
(schedules, delayed starts), RQ's scheduler and recovery."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...conf import pikku_settings
from ...engine.dispatch import all_queue_names, with_wake_queues
from ...engine.versions import register_versions
from ...executors.rq import connection, get_queue
from ..console_logging import log_to_console as _log_to_console


class Command(BaseCommand):
    help = ("Work on every workflow queue (orchestrator, step workers, dedicated queues), "
            "with RQ's scheduler for sleeps and delayed retries, and recovery sweeps.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--burst", action="store_true", help="drain the queues and exit")
        parser.add_argument("--queues", nargs="+", metavar="Q",
                            help="listen on these queues only (default: all workflow queues)")
        parser.add_argument("--workers", type=int, default=1,
                            help="number of worker processes to run (default 1)")
        parser.add_argument("--sweep-interval", type=float, default=5.0,
                            help="seconds between recovery sweeps (0: no sweeps)")
        parser.add_argument("--scheduler-interval", type=float, default=0.5,
                            help="seconds between time keeper passes: schedule ticks and "
                                 "delayed starts (0: none in this worker)")

    def handle(self, *args: Any, **options: Any) -> None:
        _log_to_console(options["verbosity"])
        if options["workers"] > 1:
            self._supervise(options)
            return
        for version, created in register_versions():
            if created:
                self.stdout.write(f"registered {version.workflow}@{version.graph_hash}")
        from ...executors.worker import PikkuWorker, SweepThread, work_until_stopped
        from ...runtime.scheduler import TimeKeeper, sync_schedules

        sync_schedules()

        names = with_wake_queues(options["queues"]) if options["queues"] else all_queue_names()

        def make_worker() -> PikkuWorker:
            return PikkuWorker([get_queue(name) for name in names], connection=connection(),
                               serializer=get_queue(names[0]).serializer,
                               worker_ttl=pikku_settings.WORKER_TTL)

        sweeper = None
        if options["sweep_interval"] > 0 and not options["burst"]:
            sweeper = SweepThread(options["sweep_interval"])
            sweeper.start()
        keeper = None
        if options["scheduler_interval"] > 0 and not options["burst"]:
            keeper = TimeKeeper(options["scheduler_interval"])
            keeper.start()
        self.stdout.write(f"pikku_worker on {', '.join(names)}")
        try:
            work_until_stopped(make_worker, burst=options["burst"])
        finally:
            if sweeper is not None:
                sweeper.stop()
            if keeper is not None:
                keeper.stop()

    def _supervise(self, options: dict[str, Any]) -> None:
        """Run N single workers as child processes; forward SIGTERM/SIGINT to them."""
        argv = [sys.executable, sys.argv[0], "pikku_worker", "--workers", "1",
                "--sweep-interval", str(options["sweep_interval"]),
                "--scheduler-interval", str(options["scheduler_interval"]),
                "--verbosity", str(options["verbosity"])]
        if options["burst"]:
            argv.append("--burst")
        if options["queues"]:
            argv += ["--queues", *options["queues"]]
        children = [subprocess.Popen(argv) for _ in range(options["workers"])]  # noqa: S603

        def forward(signum: int, frame: Any) -> None:
            for child in children:
                child.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        codes = [child.wait() for child in children]
        if any(codes):
            sys.exit(max(codes))
