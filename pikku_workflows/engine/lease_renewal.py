"""Keeping leases alive: one thread per process renews every lease a ``keep_alive``
block holds while a pass or a step runs."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection

from ..conf import pikku_settings

# Lease renewals are logged as the step worker's, where they were first written.
logger = logging.getLogger("pikku_workflows.worker")


@dataclass
class _Renewal:
    """One ``keep_alive`` block's lease: when it is next due (monotonic seconds)."""

    due: float
    interval: float
    renew: Callable[[], None]
    renewing: bool = False


class _Renewer:
    """One thread per process renewing every lease held by a ``keep_alive`` block.

    A thread started and joined per block cost two thread switches per step job; this
    one is started once and sleeps until the earliest renewal is due.
    """

    # How long the thread sleeps with nothing to renew (a block entered meanwhile whose
    # first renewal is due sooner than that wakes it).
    IDLE = 1.0

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.entries: dict[int, _Renewal] = {}
        self.tokens = itertools.count()
        self.thread: threading.Thread | None = None
        self.wake_at = 0.0

    def add(self, renew: Callable[[], None], interval: float) -> int:
        with self.cond:
            token = next(self.tokens)
            due = time.monotonic() + interval
            self.entries[token] = _Renewal(due, interval, renew)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="pikku-lease",
                                               daemon=True)
                self.wake_at = due
                self.thread.start()
            elif due < self.wake_at:
                self.cond.notify()
        return token

    def remove(self, token: int) -> None:
        """Forget a block's renewal; wait if it is being renewed right now (no renewal
        of it runs after this returns)."""
        with self.cond:
            entry = self.entries.pop(token)
            while entry.renewing:
                self.cond.wait()

    def _run(self) -> None:
        try:
            while True:
                with self.cond:
                    now = time.monotonic()
                    due = [e for e in self.entries.values() if e.due <= now]
                    if not due:
                        self.wake_at = min((e.due for e in self.entries.values()),
                                           default=now + self.IDLE)
                        self.cond.wait(self.wake_at - now)
                        continue
                    for entry in due:
                        entry.due, entry.renewing = now + entry.interval, True
                for entry in due:
                    try:
                        entry.renew()
                    except Exception:
                        # Keep beating: one failed renewal must not let the lease lapse.
                        logger.exception("lease renewal failed")
                with self.cond:
                    for entry in due:
                        entry.renewing = False
                    self.cond.notify_all()
                # This thread's own connection: kept (CONN_MAX_AGE) unless it broke.
                connection.close_if_unusable_or_obsolete()
        finally:
            connection.close()


_renewer = _Renewer()


def _new_renewer() -> None:
    global _renewer
    _renewer = _Renewer()


# A forked child has none of the parent's threads: it starts its own renewer.
os.register_at_fork(after_in_child=_new_renewer)


@contextmanager
def keep_alive(renew: Callable[[], None]) -> Iterator[None]:
    """Call ``renew`` every third of ``LEASE_TIMEOUT`` while the block runs (from the
    process's lease thread)."""
    renewer = _renewer
    token = renewer.add(renew, max(pikku_settings.LEASE_TIMEOUT / 3, 0.05))
    try:
        yield
    finally:
        renewer.remove(token)
