"""Cadences of schedules: the UTC instants of a cron in a time zone or of an interval."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..durations import parse_duration
from ..exceptions import WorkflowScheduleError

#: The shortest interval of an ``every`` schedule, in seconds.
MIN_EVERY_SECONDS = 1.0
#: The longest cron expression (the ``cron`` column).
CRON_MAX_LENGTH = 200
#: Where ``every`` ticks are counted from when the schedule has no ``start_at``.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _micros(delta: timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True)
class Cadence:
    """When a schedule ticks: exactly one of ``cron`` (5 fields, in ``tz``) and ``every``
    (seconds, from ``start_at`` or the Unix epoch), between ``start_at`` and ``end_at``.

    A local time that does not exist (spring forward) ticks once, at the next valid
    instant; a local time that happens twice (fall back) ticks once, at its first
    occurrence. Every scheduler computes the same instants.
    """

    cron: str
    every: float | None
    tz: str
    start_at: datetime | None = None
    end_at: datetime | None = None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def next_after(self, moment: datetime) -> datetime | None:
        """The first tick strictly after ``moment`` (None: the schedule has ended)."""
        return next(self.ticks_after(moment), None)

    def first_from(self, moment: datetime) -> datetime | None:
        """The first tick at or after ``moment``."""
        return self.next_after(moment - _MICRO)

    def ticks_after(self, moment: datetime) -> Iterator[datetime]:
        """The ticks strictly after ``moment``, in order, up to ``end_at``."""
        if self.start_at is not None and moment < self.start_at:
            moment = self.start_at - _MICRO
        source = self._every_after(moment) if self.every is not None else \
            self._cron_after(moment)
        for tick in source:
            if self.end_at is not None and tick > self.end_at:
                return
            yield tick

    def between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """The ticks from ``start`` to ``end``, both included."""
        for tick in self.ticks_after(start - _MICRO):
            if tick > end:
                return
            yield tick

    def count_between(self, start: datetime, end: datetime) -> int:
        """How many ticks fall from ``start`` to ``end`` (both included)."""
        if self.every is not None:
            first = self.first_from(start)
            if first is None or first > end:
                return 0
            if self.end_at is not None:
                end = min(end, self.end_at)
            step = round(self.every * 1_000_000)
            return _micros(end - first) // step + 1
        return sum(1 for _ in self.between(start, end))

    def _every_after(self, moment: datetime) -> Iterator[datetime]:
        anchor = self.start_at or EPOCH
        step = round((self.every or 0) * 1_000_000)
        k = _micros(moment - anchor) // step + 1
        if self.start_at is not None:
            k = max(k, 0)
        while True:
            yield anchor + timedelta(microseconds=k * step)
            k += 1

    def _cron_after(self, moment: datetime) -> Iterator[datetime]:
        zone = self.zone
        # Wall-clock times from a little before ``moment`` (a repeated hour's second
        # occurrence reads as an earlier wall time), turned into instants.
        local = moment.astimezone(zone).replace(tzinfo=None) - timedelta(hours=3)
        last: datetime | None = None
        for wall in CronSim(self.cron, local.replace(second=0, microsecond=0)):
            instant = _instant(wall, zone)
            if instant <= moment or (last is not None and instant <= last):
                continue
            last = instant
            yield instant


def _exists(wall: datetime, zone: ZoneInfo) -> bool:
    aware = wall.replace(tzinfo=zone)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a wall-clock time: its first occurrence, or for a time the
    clocks skip, the first valid instant after it (the end of the gap)."""
    probe = wall
    while not _exists(probe, zone):
        probe = probe.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return probe.replace(tzinfo=zone, fold=0).astimezone(UTC)


def _aware(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise WorkflowScheduleError(
            f"{field} must be a datetime, not {type(value).__name__}", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise WorkflowScheduleError(
            f"{field} {value.isoformat()} has no time zone: give an aware datetime",
            field=field)
    return value.astimezone(UTC)


def check_cadence(*, cron: str | None = None, every: float | int | str | None = None,
                  tz: str = "UTC", start_at: datetime | None = None,
                  end_at: datetime | None = None) -> Cadence:
    """Validate a schedule's timing and return its ``Cadence``.

    Raises:
        WorkflowScheduleError: ``INVALID_SCHEDULE``, naming the field at fault: both or
            neither of ``cron`` and ``every``, an invalid cron expression, ``every`` under
            one second, an unknown time zone, ``end_at`` not after ``start_at``.
    """
    has_cron = cron not in (None, "")
    has_every = every not in (None, "")
    if has_cron == has_every:
        raise WorkflowScheduleError(
            "a schedule needs exactly one of cron and every, not "
            + ("both" if has_cron else "neither"), field="cron")
    if not isinstance(tz, str) or not tz:
        raise WorkflowScheduleError(f"unknown time zone {tz!r}", field="tz")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise WorkflowScheduleError(f"unknown time zone {tz!r}", field="tz") from None
    seconds: float | None = None
    expression = ""
    if has_cron:
        if not isinstance(cron, str):
            raise WorkflowScheduleError(f"cron must be a string, not {cron!r}", field="cron")
        expression = " ".join(cron.split())
        if len(expression) > CRON_MAX_LENGTH:
            raise WorkflowScheduleError(
                f"the cron expression is {len(expression)} characters long; the limit is "
                f"{CRON_MAX_LENGTH}", field="cron")
        if len(expression.split(" ")) != 5:
            raise WorkflowScheduleError(
                f"invalid cron expression {cron!r}: expected 5 fields (minute hour "
                "day-of-month month day-of-week)", field="cron")
        try:
            CronSim(expression, datetime(2000, 1, 1))
        except CronSimError as exc:
            raise WorkflowScheduleError(
                f"invalid cron expression {cron!r}: {exc}", field="cron") from None
    else:
        try:
            seconds = parse_duration(every, what="every")
        except ValueError as exc:
            raise WorkflowScheduleError(str(exc), field="every") from None
        if seconds < MIN_EVERY_SECONDS:
            raise WorkflowScheduleError(
                f"every {every!r} is under one second: the shortest interval is 1s",
                field="every")
    start = _aware(start_at, "start_at")
    end = _aware(end_at, "end_at")
    if start is not None and end is not None and end <= start:
        raise WorkflowScheduleError(
            f"end_at {end.isoformat()} is not after start_at {start.isoformat()}",
            field="end_at")
    cadence = Cadence(cron=expression, every=seconds, tz=tz, start_at=start, end_at=end)
    if has_cron and cadence.next_after(datetime(2000, 1, 1, tzinfo=UTC)) is None:
        raise WorkflowScheduleError(f"cron expression {cron!r} never fires", field="cron")
    return cadence
