"""Named step limits: what each one allows now, and taking and giving back its slots."""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db.models.signals import post_delete, post_save

from ..conf import pikku_settings
from ..durations import parse_rate
from ..models import WorkflowLimit, WorkflowRun
from ..registry import registry
from .clock import Clock, clock
from .dispatch import get_executor, step_dispatcher, transport_configured
from .lease_renewal import keep_alive
from .store import UnitOfWork
from .store import limits as slots
from .store.backends import SlotTake, backend
from .store.runs import lease_until

logger = logging.getLogger("pikku_workflows.limits")

#: How long a process trusts the overrides it read (the Limits page's edits reach every
#: worker within this; the process that saves one sees it at once).
OVERRIDES_TTL = 2.0
#: A rate's slot frees itself this long after its period ends (at most 5 % of the period):
#: a step begins a moment after its start is stamped, so that a window of the steps' own
#: start times holds no more starts than the rate allows.
RATE_MARGIN = 0.05
#: How many slot rows a limit grows by, at least, when all it has are taken (at most as
#: many as it has: its rows double, so a busy rate makes its rows a few times, not every
#: ``SLOT_BATCH`` starts).
SLOT_BATCH = 32
#: A step waiting for a concurrency slot tries again within this many seconds (jittered)
#: even if no holder wakes it (the holder's process died: its lease must expire first).
CONCURRENCY_RETRY = (1.0, 2.0)


@dataclass(frozen=True)
class Limit:
    """A named limit as it applies now: the setting, overridden by its ``WorkflowLimit``."""

    name: str
    concurrency: int | None
    rate: tuple[int, float] | None
    declared: bool = True


class Blocked(NamedTuple):
    """A limit that is full: the step waits for ``limit`` until ``wake_at``."""

    limit: str
    wake_at: datetime


@dataclass
class Held:
    """The concurrency slots an attempt holds (rate slots are spent, never given back)."""

    slots: list[tuple[str, int, str]] = field(default_factory=list)


_cache: dict[str, tuple[int | None, str | None]] | None = None
_cache_read_at = 0.0
_cache_lock = threading.Lock()


def forget_overrides(**kwargs: Any) -> None:
    """Read the overrides again at the next use (a ``WorkflowLimit`` was saved)."""
    global _cache
    with _cache_lock:
        _cache = None


post_save.connect(forget_overrides, sender=WorkflowLimit, dispatch_uid="pikku_limits_saved")
post_delete.connect(forget_overrides, sender=WorkflowLimit, dispatch_uid="pikku_limits_deleted")


def _overrides() -> dict[str, tuple[int | None, str | None]]:
    global _cache, _cache_read_at
    found = _cache
    if found is None or time.monotonic() - _cache_read_at > OVERRIDES_TTL:
        found = {name: (concurrency, rate) for name, concurrency, rate in
                 WorkflowLimit.objects.values_list("name", "concurrency", "rate")}
        with _cache_lock:
            _cache, _cache_read_at = found, time.monotonic()
    return found


def effective(name: str) -> Limit:
    """The limit ``name`` as it applies now (an override's fields replace the setting's)."""
    spec = pikku_settings.LIMITS.get(name)
    concurrency, rate = (spec or {}).get("concurrency"), (spec or {}).get("rate")
    override = _overrides().get(name)
    if override is not None:
        concurrency = override[0] if override[0] is not None else concurrency
        rate = override[1] if override[1] is not None else rate
    parsed = None
    if rate is not None:
        try:
            parsed = parse_rate(rate)
        except ValueError as exc:  # an override written around the admin's form
            logger.error("limit %r: %s; its rate is not applied", name, exc)
    return Limit(name, concurrency, parsed, declared=spec is not None)


def _take(name: str, kind: str, size: int, holder: str, until: datetime, now: datetime,
          period: float) -> int | datetime:
    """Take a slot (its number), or the time of the next try when the limit is full."""
    # A rate's starts are stamped by the database's clock where it can (unless a test's
    # fake clock drives time): a worker delayed between its clock reading and its
    # statement must not stamp its start earlier than it took it.
    stamp = period if kind == slots.RATE and type(clock()) is Clock else None
    slot = slots.take_slot(name, kind, size, holder, until, now, database_time=stamp)
    if slot is not None:
        return slot
    rows, first = slots.slot_state(name, kind, size, now)
    if rows < size:
        # Every row is taken and the limit allows more: more rows, and again. A limit
        # has at most twice as many rows as it ever had slots taken at once (a rate:
        # starts in one period), not as many as it allows.
        slots.ensure_slots(name, kind, rows, min(size, rows + max(SLOT_BATCH, rows)))
        slot = slots.take_slot(name, kind, size, holder, until, now, database_time=stamp)
        if slot is not None:
            return slot
    if kind == slots.RATE:
        # Waiters spread after the first free slot over as many periods as they fill (a
        # try each per token, about), not all at that instant.
        base = first if first is not None and first > now else now
        spread = period * max(1.0, slots.waiting_count(name) / size)
        return base + timedelta(seconds=random.uniform(0, spread))
    poll = now + timedelta(seconds=random.uniform(*CONCURRENCY_RETRY))
    return min(poll, first) if first is not None and first > now else poll


def acquire(names: tuple[str, ...]) -> Held | Blocked:
    """Take a slot of every limit in ``names`` for one attempt, or none of them.

    Concurrency slots first, then rates (a start is spent only once it may run). A name
    ``LIMITS`` does not declare limits nothing (the system check reports it).
    """
    now = clock().now()
    holder = uuid.uuid4().hex
    held = Held()
    limits = [effective(name) for name in names]
    for limit in limits:
        if limit.concurrency is None:
            continue
        slot = _take(limit.name, slots.CONCURRENCY, limit.concurrency, holder,
                     lease_until(now), now, 0)
        if isinstance(slot, datetime):
            release(held)
            return Blocked(limit.name, slot)
        held.slots.append((limit.name, slot, holder))
    for limit in limits:
        if limit.rate is None:
            continue
        count, period = limit.rate
        period += min(RATE_MARGIN, period * 0.05)
        taken = _take(limit.name, slots.RATE, count, holder,
                      now + timedelta(seconds=period), now, period)
        if isinstance(taken, datetime):
            release(held)
            return Blocked(limit.name, taken)
    return held


def release(held: Held) -> None:
    """Give back the concurrency slots and, for each one freed, wake the waiting step due
    first."""
    give_back(held.slots)
    held.slots = []


def give_back(taken: list[tuple[str, int, str]]) -> None:
    """Give back these concurrency slots (name, slot, holder) and, for each one freed
    (still the holder's), wake the waiting step due first."""
    now = clock().now()
    for name, slot, holder in taken:
        woken = slots.give_back_and_wake(name, slot, holder, now)
        if woken is not None:
            _dispatch_woken(*woken)


def single_take(names: tuple[str, ...], work: UnitOfWork) -> SlotTake | None:
    """The one slot an attempt of a step limited by ``names`` needs, to be taken by its
    start's own write (``UnitOfWork.begin_attempt_taking``); None when it needs none or
    more than one (``acquire`` takes them). A concurrency slot the pass holds for the
    limit (its attempt before) is passed on."""
    if len(names) != 1 or not backend().takes_slots_in_checkpoint:
        return None
    limit = effective(names[0])
    now = clock().now()
    holder = uuid.uuid4().hex
    if limit.concurrency is not None and limit.rate is None:
        return SlotTake(limit.name, slots.CONCURRENCY, limit.concurrency, holder,
                        lease_until(now), passed=work.passed_slot(limit.name))
    if limit.rate is not None and limit.concurrency is None:
        count, period = limit.rate
        period += min(RATE_MARGIN, period * 0.05)
        # As ``_take``: the database's clock stamps a start, unless a fake clock drives.
        stamp = period if type(clock()) is Clock else None
        return SlotTake(limit.name, slots.RATE, count, holder,
                        now + timedelta(seconds=period), database_time=stamp)
    return None


def held_by(take: SlotTake, slot: int) -> Held:
    """What an attempt that took ``take``'s slot (number ``slot``) holds."""
    return Held([(take.name, slot, take.holder)] if take.kind == slots.CONCURRENCY else [])


@contextmanager
def holding(held: Held, work: UnitOfWork | None = None) -> Iterator[None]:
    """A block that holds ``held``: its leases renewed meanwhile, given back at the end
    (with ``work``, a pass's, at the pass's next write: ``UnitOfWork.defer_give_back``)."""
    if not held.slots:
        yield
        return
    try:
        with keep_alive(lambda: slots.renew_slots(held.slots, lease_until(clock().now()))):
            yield
    finally:
        if work is None:
            release(held)
        else:
            work.defer_give_back(held.slots, give_back)
            held.slots = []


def _dispatch_woken(run_id: str, step_name: str, rpc_name: str | None) -> None:
    """Send the step a freed slot woke on its way (its row is due already)."""
    definition = registry.function(rpc_name or "")
    if definition is not None and definition.queued and transport_configured():
        step_dispatcher(False).dispatch_step(run_id, step_name, rpc_name or "",
                                             queue=definition.queue)
    elif transport_configured() and WorkflowRun.objects.filter(
            pk=run_id, inline=False).exists():
        get_executor(False).enqueue_pass(run_id)
    # An inline run's pass sleeps until its next try (its process holds it).
