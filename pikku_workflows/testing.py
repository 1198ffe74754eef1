"""Helpers for users' own test suites: run workflows inline, and a fake clock.

Example::

    from pikku_workflows.testing import fake_clock, run_inline

    def test_order_flow(db):
        with run_inline(), fake_clock() as clock:
            run = pw.start_workflow("process_order", {...})   # sleeps pass instantly
            clock.advance("3d")                               # approval deadlines pass
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from .durations import parse_duration
from .engine.clock import Clock, install_clock
from .engine.recovery import wake_expired_gates


class FakeClock(Clock):
    """A clock whose waits return at once, moving its time forward instead."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or timezone.now()

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._now += timedelta(seconds=seconds)

    def advance(self, duration: float | str) -> None:
        """Move time forward, then wake runs whose approval deadline passed."""
        self.sleep(parse_duration(duration))
        wake_expired_gates(self._now)


@contextmanager
def fake_clock(start: datetime | None = None) -> Iterator[FakeClock]:
    """Install a ``FakeClock``: sleeps, retry delays and approval expiry pass instantly."""
    clock = FakeClock(start)
    previous = install_clock(clock)
    try:
        yield clock
    finally:
        install_clock(previous)


@contextmanager
def run_inline() -> Iterator[None]:
    """Run every workflow started inside the block in the calling process."""
    current = dict(getattr(settings, "PIKKU_WORKFLOWS", None) or {})
    with override_settings(PIKKU_WORKFLOWS={**current, "EXECUTOR": "inline"}):
        yield
