"""Parsing of durations: seconds as numbers, or strings such as ``"250ms"`` or ``"3d"``."""

from __future__ import annotations

import math
import re

_UNITS = {
    "ms": 0.001,
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}
_PATTERN = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")
_SECONDS = re.compile(r"^\s*\d+(\.\d+)?\s*$")

#: The longest duration anything may wait (100 years): beyond it dates leave the calendar.
MAX_DURATION_SECONDS = 100 * 365.25 * 86400
# More digits than any duration up to the maximum has (in ms, its smallest unit): longer
# numbers are refused before they are converted (int() refuses 4,300 digits, float()
# overflows past 1e308).
_MAX_DIGITS = 15


def _shown(value: object) -> str:
    """``repr(value)``, shortened (a huge int has no repr past 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**20:
        return f"(a number of {int(math.log10(abs(value))) + 1} digits)"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _too_long(what: str, value: object) -> ValueError:
    return ValueError(f"invalid {what} {_shown(value)}: the longest duration is 100 years "
                      f"({MAX_DURATION_SECONDS:.0f} seconds)")


def parse_duration(value: float | int | str | None, *, what: str = "duration") -> float:
    """Return a duration in seconds.

    Args:
        value: A non-negative number of seconds, or ``"<int><unit>"`` with units
            ``ms s sec second(s) m min minute(s) h hour(s) d day(s) w week(s)``.
        what: How to name the value in an error message.

    Raises:
        ValueError: The value is not a valid duration.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"invalid {what} {value!r}: expected seconds or a string like '5s'")
    seconds: float | None = None
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"invalid {what} {_shown(value)}: must not be negative")
        if value > MAX_DURATION_SECONDS:  # before float(): 10**400 would overflow
            raise _too_long(what, value)
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value.lower())
        if match and match.group(2) in _UNITS:
            digits = match.group(1).lstrip("0")
            if len(digits) > _MAX_DIGITS:
                raise _too_long(what, value)
            seconds = int(digits or "0") * _UNITS[match.group(2)]
        elif _SECONDS.match(value):
            # Plain seconds, fractions included: the form numbers are stored in.
            if len(value.strip().split(".")[0].lstrip("0")) > _MAX_DIGITS:
                raise _too_long(what, value)
            seconds = float(value)
    if seconds is None:
        raise ValueError(
            f"invalid {what} {_shown(value)}: expected seconds or '<int><unit>' with a unit "
            "among ms, s, sec, second(s), m, min, minute(s), h, hour(s), d, day(s), w, "
            "week(s)"
        )
    if not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        raise _too_long(what, value)
    return seconds


_RATE = re.compile(r"^\s*(\d{1,9})\s*/\s*(\S.*?)\s*$")


def parse_rate(value: object, *, what: str = "rate") -> tuple[int, float]:
    """Return a rate ``"100/min"`` as ``(starts, period in seconds)``.

    Args:
        value: ``"<int>/<period>"``: a unit (``s``, ``min``, ``h``, ``d``...) or any
            duration (``"5/10s"``), with at least one start and a period of at least 1 ms.
        what: How to name the value in an error message.

    Raises:
        ValueError: The value is not a valid rate.
    """
    expected = "expected a string like '100/min' or '20/s'"
    if not isinstance(value, str):
        raise ValueError(f"invalid {what} {_shown(value)}: {expected}")
    match = _RATE.match(value)
    if match is None:
        raise ValueError(f"invalid {what} {_shown(value)}: {expected}")
    count, period = int(match.group(1)), match.group(2)
    if count < 1:
        raise ValueError(f"invalid {what} {value!r}: at least 1 start per period")
    unit = _UNITS.get(period.lower())
    try:
        seconds = float(unit) if unit is not None else parse_duration(period, what=what)
    except ValueError:
        raise ValueError(f"invalid {what} {value!r}: {expected}") from None
    if seconds < 0.001:
        raise ValueError(f"invalid {what} {value!r}: the period must be at least 1 ms")
    return count, seconds
