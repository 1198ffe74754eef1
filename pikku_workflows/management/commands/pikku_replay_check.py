"""``manage.py pikku_replay_check``: replay recorded runs dry through the current code."""

from __future__ import annotations

import time
from typing import Any
from xml.etree import ElementTree

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...replay_checks import CheckedRun, check_runs
from ..run_filters import add_run_filters, filtered_runs


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
        add_run_filters(parser)
        parser.add_argument("--format", choices=("text", "junit"), default="text",
                            help="text (default): one line per diverging run and a "
                            "summary; junit: a JUnit XML report for CI")
        parser.add_argument("--as-resumed", action="store_true",
                            help="replay graph runs on the stored version a pass would "
                            "resume them on, not on the current graph")

    def handle(self, *args: Any, **options: Any) -> None:
        runs = filtered_runs(options)
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
