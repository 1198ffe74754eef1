"""The order of every attempt's timestamps: one check shared by the unit, fault and soak
suites."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import pairwise
from typing import Any

from pikku_workflows.models import StepAttempt

STAMPS = ("created_at", "scheduled_at", "running_at", "succeeded_at", "failed_at")


def attempt_order_problems(run_ids: Iterable[Any] | None = None, *, limit: int = 10
                           ) -> list[str]:
    """The attempts (of the steps of ``run_ids``; None: all) whose timestamps break
    ``created_at <= scheduled_at <= running_at <= succeeded_at / failed_at`` (each one
    that is set), described; at most ``limit`` of them, then a count of the rest."""
    attempts = StepAttempt.objects.all()
    if run_ids is not None:
        attempts = attempts.filter(step__run__in=list(run_ids))
    problems = []
    for row in attempts.order_by("pk").values("step__run_id", "step__step_name", "attempt",
                                              *STAMPS).iterator(chunk_size=2000):
        stamps: list[tuple[str, datetime]] = [(name, row[name]) for name in STAMPS
                                              if row[name] is not None]
        if any(earlier[1] > later[1] for earlier, later in pairwise(stamps)):
            problems.append(
                f"run {row['step__run_id']} step {row['step__step_name']!r} attempt "
                f"{row['attempt']}: " + ", ".join(f"{name} {value.isoformat()}"
                                                  for name, value in stamps))
    if len(problems) > limit:
        problems[limit:] = [f"... and {len(problems) - limit} more attempts out of order"]
    return problems
