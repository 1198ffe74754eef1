"""``manage.py pikku_export_runs``: write runs and their steps as JSON for ``assert_replays``."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from ...replay_checks import export_runs
from ..run_filters import add_run_filters, filtered_runs


class _Unended:
    """The command's output, written as given (``OutputWrapper`` ends each write)."""

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out

    def write(self, text: str) -> object:
        self.out.write(text, ending="")
        return None


class Command(BaseCommand):
    help = ("Write recorded runs with their steps as JSON, which "
            "pikku_workflows.testing.assert_replays(path=...) replays in a test suite.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", "-o", default="-",
                            help="the file to write (default: standard output)")
        add_run_filters(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        runs = filtered_runs(options)
        if options["output"] == "-":
            export_runs(runs, _Unended(self.stdout))
            return
        # Written beside, then moved: an interrupted export leaves no half file.
        partial = options["output"] + ".partial"
        try:
            with open(partial, "w", encoding="utf-8") as out:
                count = export_runs(runs, out)
        except OSError as exc:
            raise CommandError(f"cannot write {options['output']!r}: {exc}") from None
        os.replace(partial, options["output"])
        self.stderr.write(f"exported {count} run{'s' if count != 1 else ''} to "
                          f"{options['output']}")
