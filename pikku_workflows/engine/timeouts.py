"""Step time limits: an attempt that runs too long fails (and is retried like any other)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class StepTimeoutError(Exception):
    """An attempt exceeded its step's ``timeout``."""


@contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise ``StepTimeoutError`` in the block after ``seconds`` (main thread only).

    Uses ``SIGALRM`` like RQ's own death penalty; elsewhere (other threads, Windows) the
    limit is not enforced.
    """
    usable = (seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable or seconds is None:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise StepTimeoutError(f"{what} exceeded its timeout of {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
