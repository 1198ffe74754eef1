"""The run filters shared by ``pikku_replay_check`` and ``pikku_export_runs``."""

from __future__ import annotations

from datetime import datetime
from datetime import time as day_start
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ..models import WorkflowRun
from ..replay_checks import runs_to_check
from ..status import RunStatus


def add_run_filters(parser: CommandParser) -> None:
    """Add ``--workflow``, ``--status``, ``--since`` and ``--limit`` to a command."""
    parser.add_argument("--workflow", help="only the runs of this workflow")
    parser.add_argument("--status", nargs="+", default=[], choices=RunStatus.values,
                        metavar="STATUS", help="only runs in these statuses "
                        f"({', '.join(RunStatus.values)})")
    parser.add_argument("--since", help="only runs created at or after this date "
                        "(YYYY-MM-DD) or ISO date and time")
    parser.add_argument("--limit", type=int, help="at most this many runs (the newest)")


def filtered_runs(options: dict[str, Any]) -> QuerySet[WorkflowRun]:
    """The runs the options of :func:`add_run_filters` select.

    Raises:
        CommandError: ``--since`` is not a date, or a filter is invalid.
    """
    since = _since(options["since"]) if options["since"] else None
    try:
        return runs_to_check(workflow=options["workflow"], statuses=options["status"],
                             since=since, limit=options["limit"])
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _since(text: str) -> datetime:
    return parse_moment(text, "--since")


def parse_moment(text: str, option: str) -> datetime:
    """A command's date or ISO date and time, aware (a naive one is in ``TIME_ZONE``).

    Raises:
        CommandError: ``text`` is neither, naming ``option``.
    """
    try:
        moment = parse_datetime(text)
    except ValueError:
        moment = None
    if moment is None:
        try:
            day = parse_date(text)
        except ValueError:
            day = None
        if day is None:
            raise CommandError(f"{option} {text!r} is not a date (YYYY-MM-DD) or an ISO "
                               "date and time")
        moment = datetime.combine(day, day_start.min)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment
