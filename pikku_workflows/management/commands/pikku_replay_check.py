"""``manage.py pikku_replay_check``: replay recorded runs dry through the current code."""

from __future__ import annotations

import time
from datetime import datetime
from datetime import time as day_start
from typing import Any
from xml.etree import ElementTree

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ...replay_checks import CheckedRun, check_runs, runs_to_check
from ...status import RunStatus


def _since(text: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise CommandError(f"--since {text!r} is not a date (YYYY-MM-DD) or an ISO "
                               "date and time")
        moment = datetime.combine(day, day_start.min)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


def _line(checked: CheckedRun) -> str:
    divergence = checked.divergence
    assert divergence is not None
    asked = repr(divergence.step_asked) if divergence.step_asked else "none"
    return (f"DIVERGES {checked.run_id} {checked.workflow} [{checked.status}] "
            f"recorded={divergence.step_recorded!r} asked={asked}: {divergence.message}")


def _junit(checked: list[CheckedRun], seconds: float) -> str:
    failures = [c for c in checked if c.divergence is not None]
    suite = ElementTree.Element("testsuite", {
        "name": "pikku_replay_check", "tests": str(len(checked)),
        "failures": str(len(failures)), "errors": "0", "time": f"{seconds:.3f}"})
    for item in checked:
        case = ElementTree.SubElement(suite, "testcase", {
            "classname": f"pikku_replay_check.{item.workflow}", "name": item.run_id})
        if item.divergence is not None:
            failure = ElementTree.SubElement(case, "failure", {
                "type": item.divergence.code, "message": item.divergence.message})
            failure.text = (f"recorded: {item.divergence.step_recorded}\n"
                            f"asked: {item.divergence.step_asked}\n")
    ElementTree.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(
        suite, encoding="unicode") + "\n"


class Command(BaseCommand):
    help = ("Replay recorded runs through the current code without calling any step "
            "function or writing anything; print the runs that diverge (exit status 1).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workflow", help="only the runs of this workflow")
        parser.add_argument("--status", nargs="+", default=[], choices=RunStatus.values,
                            metavar="STATUS", help="only runs in these statuses "
                            f"({', '.join(RunStatus.values)})")
        parser.add_argument("--since", help="only runs created at or after this date "
                            "(YYYY-MM-DD) or ISO date and time")
        parser.add_argument("--limit", type=int, help="at most this many runs (the newest)")
        parser.add_argument("--format", choices=("text", "junit"), default="text",
                            help="text (default): one line per diverging run and a "
                            "summary; junit: a JUnit XML report for CI")
        parser.add_argument("--as-resumed", action="store_true",
                            help="replay graph runs on the stored version a pass would "
                            "resume them on, not on the current graph")

    def handle(self, *args: Any, **options: Any) -> None:
        since = _since(options["since"]) if options["since"] else None
        try:
            runs = runs_to_check(workflow=options["workflow"], statuses=options["status"],
                                 since=since, limit=options["limit"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        started = time.monotonic()
        checked = []
        for item in check_runs(runs, as_resumed=options["as_resumed"]):
            checked.append(item)
            if item.divergence is not None and options["format"] == "text":
                self.stdout.write(_line(item))
        seconds = time.monotonic() - started
        diverging = sum(1 for item in checked if item.divergence is not None)
        if options["format"] == "junit":
            self.stdout.write(_junit(checked, seconds), ending="")
        else:
            workflows = len({item.workflow for item in checked})
            self.stdout.write(
                f"checked {len(checked)} run{'s' if len(checked) != 1 else ''} of "
                f"{workflows} workflow{'s' if workflows != 1 else ''} in {seconds:.1f}s: "
                f"{len(checked) - diverging} replay, {diverging} diverge")
        if diverging:
            raise CommandError(f"{diverging} run{'s' if diverging != 1 else ''} diverge "
                               "from the current code", returncode=1)
