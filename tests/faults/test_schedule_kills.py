"""Exactly once per tick: three ``pikku_worker`` processes run the time keeper at once, one
SIGKILLed every few seconds (and restarted), over 200 ticks of every-second schedules."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from datetime import timedelta

from django.db.models import Count
from django.utils import timezone

from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick
from pikku_workflows.status import RunStatus
from tests.services import wait_for

#: Four every-second schedules of 50 ticks each: 200 ticks, fired while the schedulers
#: are killed, the schedules' ticks of a second written together (a pass's batch).
SCHEDULES = 4
TICKS_EACH = 50
#: The first few ticks are due when the schedules appear (within their catch-up
#: window); the rest fall due one a second. The whole test stays near a minute.
BACKLOG = 5


def test_three_schedulers_one_killed_every_few_seconds_fire_each_tick_exactly_once(workers):
    rng = random.Random(27)
    workers.start(3, "--scheduler-interval", "0.2")
    start = (timezone.now() - timedelta(seconds=BACKLOG)).replace(microsecond=0)
    end = start + timedelta(seconds=TICKS_EACH - 1)
    schedules = [WorkflowSchedule.objects.create(
        name=f"every_second_{i}", workflow="sched_echo", every=1, input={"chaos": True},
        overlap="allow", catchup=600, start_at=start, end_at=end, source="admin",
        next_fire_at=start) for i in range(SCHEDULES)]
    kills = 0
    while timezone.now() < end + timedelta(seconds=2):
        time.sleep(rng.uniform(1.0, 3.0))
        victims = [p for p in workers.procs if p.poll() is None]
        workers.kill(rng.choice(victims), signal.SIGKILL)
        kills += 1
        workers.start(1, "--scheduler-interval", "0.2")
    wait_for(lambda: not WorkflowSchedule.objects.filter(
        pk__in=[s.pk for s in schedules], next_fire_at__isnull=False).exists(), timeout=30)
    assert kills >= 8  # a restart takes seconds too: about one kill every 4-6 s

    expected = [start + timedelta(seconds=k) for k in range(TICKS_EACH)]
    for schedule in schedules:
        ticks = list(schedule.ticks.order_by("tick_at"))
        # Every tick has exactly one row: none missing, none doubled, none missed.
        assert [t.tick_at for t in ticks] == expected, schedule.name
        assert Counter(t.status for t in ticks) == {"started": TICKS_EACH}
        # At most one run per tick (exactly one here: overlap "allow"), each the tick's.
        runs = WorkflowRun.objects.filter(schedule=schedule)
        assert runs.count() == TICKS_EACH
        assert not runs.values("scheduled_at").annotate(n=Count("pk")).filter(n__gt=1).exists()
        assert {t.run_id for t in ticks} == set(runs.values_list("pk", flat=True))
        assert all(t.run.scheduled_at == t.tick_at for t in ticks)
    runs = WorkflowRun.objects.filter(schedule__in=schedules)
    assert WorkflowScheduleTick.objects.filter(schedule__in=schedules).count() == 200
    # And every run ends (recovery re-drives those whose worker was killed).
    wait_for(lambda: not runs.exclude(status=RunStatus.COMPLETED).exists(), timeout=60)
