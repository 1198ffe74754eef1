"""``manage.py pikku_start NAME [JSON] [--wait]``: start a workflow run from the shell."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import WorkflowError
from ...operations import get_run_status, start_workflow
from ...status import RunStatus


class Command(BaseCommand):
    help = "Start a run of a registered workflow and print its id (and result with --wait)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the registered workflow name")
        parser.add_argument("input", nargs="?", default="null", help="the run input, as JSON")
        parser.add_argument("--wait", action="store_true",
                            help="wait until the run settles and print its status as JSON")
        parser.add_argument("--inline", action="store_true",
                            help="run in this process, whatever the EXECUTOR setting")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            data = json.loads(options["input"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"the input is not valid JSON: {exc}") from None
        try:
            run = start_workflow(options["name"], data, inline=options["inline"] or None,
                                 wire={"type": "cli"})
        except WorkflowError as exc:
            raise CommandError(str(exc)) from None
        if not options["wait"]:
            self.stdout.write(str(run.pk))
            return
        status = get_run_status(run.pk)
        while status["status"] == RunStatus.RUNNING:
            time.sleep(0.2)
            status = get_run_status(run.pk)
        self.stdout.write(json.dumps(status, indent=2))
        if status["status"] != RunStatus.COMPLETED:
            raise CommandError(f"run {run.pk} ended {status['status']}: {status['error']}")
