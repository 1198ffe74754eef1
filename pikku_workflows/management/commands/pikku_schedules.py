"""``manage.py pikku_schedules``: list schedules with their next fire times, or act on one."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import WorkflowError
from ...models import WorkflowSchedule, WorkflowScheduleTick
from ...operations import (
    backfill_schedule,
    next_fire_times,
    pause_schedule,
    resume_schedule,
    trigger_schedule,
)
from ..run_filters import parse_moment


def _cadence(schedule: WorkflowSchedule) -> str:
    if schedule.cron:
        return f"cron '{schedule.cron}' {schedule.tz}"
    return f"every {schedule.every:g}s"


def _tick_line(tick: WorkflowScheduleTick) -> str:
    line = f"  {tick.tick_at.isoformat()} {tick.trigger} {tick.status}"
    if tick.run_id:
        line += f" run {tick.run_id}"
    if tick.missed_count > 1 and tick.missed_until:
        line += f" ({tick.missed_count} ticks to {tick.missed_until.isoformat()})"
    if tick.detail and tick.status != "started":
        line += f": {tick.detail}"
    return line


class Command(BaseCommand):
    help = ("List the schedules (cadence, next five fire times, last tick), or trigger, "
            "pause, resume or backfill one.")

    def add_arguments(self, parser: CommandParser) -> None:
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--trigger", metavar="NAME",
                            help="fire the schedule now (its overlap policy applies)")
        action.add_argument("--pause", metavar="NAME", help="pause the schedule")
        action.add_argument("--resume", metavar="NAME", help="resume the schedule")
        action.add_argument("--backfill", nargs=3, metavar=("NAME", "FROM", "TO"),
                            help="fire the ticks from FROM to TO (ISO dates and times; "
                                 "without an offset, in TIME_ZONE), in order, under the "
                                 "overlap policy")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._act(options)
        except WorkflowError as exc:
            raise CommandError(str(exc)) from None

    def _act(self, options: dict[str, Any]) -> None:
        if options["trigger"]:
            tick = trigger_schedule(options["trigger"])
            self.stdout.write(f"{options['trigger']}:")
            self.stdout.write(_tick_line(tick))
        elif options["pause"]:
            pause_schedule(options["pause"])
            self.stdout.write(f"{options['pause']} paused")
        elif options["resume"]:
            schedule = resume_schedule(options["resume"])
            upcoming = schedule.next_fire_at.isoformat() if schedule.next_fire_at else "never"
            self.stdout.write(f"{options['resume']} resumed; next tick {upcoming}")
        elif options["backfill"]:
            name, start, end = options["backfill"]
            ticks = backfill_schedule(name, parse_moment(start, "FROM"),
                                      parse_moment(end, "TO"))
            self.stdout.write(f"{name}: {len(ticks)} tick{'s' if len(ticks) != 1 else ''} "
                              "backfilled")
            for tick in ticks:
                self.stdout.write(_tick_line(tick))
        else:
            self._list()

    def _list(self) -> None:
        schedules = list(WorkflowSchedule.objects.order_by("name"))
        if not schedules:
            self.stdout.write("no schedules")
            return
        for schedule in schedules:
            flags = [schedule.source, f"overlap {schedule.overlap}"]
            if schedule.catchup:
                flags.append(f"catchup {schedule.catchup:g}s")
            if schedule.paused:
                flags.append("PAUSED")
            self.stdout.write(f"{schedule.name}: {schedule.workflow}, {_cadence(schedule)} "
                              f"({', '.join(flags)})")
            upcoming = next_fire_times(schedule, 5)
            self.stdout.write("  next: " + (", ".join(t.isoformat() for t in upcoming)
                                            if upcoming else "none (ended)"))
            last = schedule.ticks.order_by("-tick_at").first()
            if last is not None:
                self.stdout.write("  last:" + _tick_line(last)[1:])
