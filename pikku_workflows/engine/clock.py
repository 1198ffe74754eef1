"""The engine's clock: real time, replaceable by ``pikku_workflows.testing.fake_clock``."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.utils import timezone


class Clock:
    """Wall-clock time and blocking waits."""

    def now(self) -> datetime:
        return timezone.now()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def sleep_until(self, moment: datetime) -> None:
        self.sleep((moment - self.now()).total_seconds())

    def after(self, seconds: float) -> datetime:
        return self.now() + timedelta(seconds=seconds)


class _ClockHolder:
    current: Clock = Clock()


def clock() -> Clock:
    """The clock in force (the real one unless a test installed a fake)."""
    return _ClockHolder.current


def install_clock(new: Clock) -> Clock:
    """Install ``new`` and return the previous clock."""
    previous, _ClockHolder.current = _ClockHolder.current, new
    return previous
