"""Mirrors: write-only companions that receive every committed run, step, attempt and version.

Set ``PIKKU_WORKFLOWS["MIRROR"]`` to the dotted path of a ``Mirror`` subclass. The
engine notes which run or version changed in an outbox entry, written in the transaction
of the change (before it, for a change in autocommit: ``changing``); after commit, a
background thread per process reads the rows, calls ``Mirror.write`` for each and
deletes the entry. A slow or failing mirror never slows or
fails a workflow: while it is down the entries wait, one warning is logged, and they are
caught up when it returns (by that thread, ``pikku_worker``'s timer or
``manage.py pikku_mirror_sync``).

The shipped ``DatabaseMirror`` copies the rows into another database alias (say a
reporting replica), which must have this app's tables migrated::

    DATABASES = {"default": {...}, "pikku_mirror": {...}}
    PIKKU_WORKFLOWS = {"MIRROR": "pikku_workflows.mirror.DatabaseMirror"}
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, models, transaction

from .conf import pikku_settings

if TYPE_CHECKING:
    from .models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion

    MirroredModel = type[WorkflowRun | WorkflowStep | StepAttempt | WorkflowVersion]

logger = logging.getLogger("pikku_workflows.mirror")

BACKLOG_LIMIT = 10_000
# While the mirror is down, how often a process's forwarder tries to catch up.
RETRY_EVERY = 5.0
# Outbox entries read per query when catching up.
CHUNK = 500

# An outbox entry: (its primary key, kind, key).
Entry = tuple[int, str, str]


class MirrorUnavailableError(Exception):
    """The mirror failed to take a row; the outbox keeps what it has not received."""


class Mirror:
    """Receives rows, as dicts of column values, after they were committed."""

    def write(self, kind: str, row: dict[str, object]) -> None:
        """Store one row; ``kind`` is ``run``, ``step``, ``attempt`` or ``version``."""
        raise NotImplementedError


class DatabaseMirror(Mirror):
    """Upserts every row into the database alias ``alias`` (default ``pikku_mirror``)."""

    alias = "pikku_mirror"

    def write(self, kind: str, row: dict[str, object]) -> None:
        from django.contrib.auth import get_user_model

        model = _models()[kind]
        values: dict[str, Any] = dict(row)  # column values, as the ORM takes them
        owner = values.get("owner_id")
        if owner is not None and not get_user_model().objects.using(self.alias).filter(
                pk=owner).exists():
            values["owner_id"] = None  # users live in the primary database only
        pk = values.pop("id")
        model.objects.using(self.alias).update_or_create(pk=pk, defaults=values)


def _models() -> dict[str, MirroredModel]:
    from .models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion

    return {"run": WorkflowRun, "step": WorkflowStep, "attempt": StepAttempt,
            "version": WorkflowVersion}


def _row(instance: models.Model) -> dict[str, object]:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


class _Outage:
    """Whether this process sees the mirror down: one warning when it starts, one info
    when it ends."""

    def __init__(self) -> None:
        self.down = False
        self.lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        with self.lock:
            if self.down:
                return
            self.down = True
        logger.warning("the mirror is unavailable (%s: %s); changes wait in the outbox "
                       "until it returns", type(exc).__name__, exc, exc_info=exc)

    def recovered(self, count: int) -> None:
        with self.lock:
            if not self.down:
                return
            self.down = False
        logger.info("the mirror is back: %d runs and versions caught up", count)


_outage = _Outage()


def _mirror() -> Mirror | None:
    target = pikku_settings.MIRROR
    # MIRROR is a Mirror subclass or instance (conf cannot name the class).
    return cast("Mirror | None", target() if isinstance(target, type) else target)


def _forward(mirror: Mirror, kind: str, key: str) -> None:
    from .models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion

    if kind == "version":
        version = WorkflowVersion.objects.filter(pk=int(key)).first()
        if version is not None:
            mirror.write("version", _row(version))
        return
    run_id = uuid.UUID(key)
    run = WorkflowRun.objects.filter(pk=run_id).first()
    if run is None:
        return
    mirror.write("run", _row(run))
    for step in WorkflowStep.objects.filter(run_id=run_id).order_by("id"):
        mirror.write("step", _row(step))
    for attempt in StepAttempt.objects.filter(step__run_id=run_id).order_by("id"):
        mirror.write("attempt", _row(attempt))


def _deliver(entries: Iterable[Entry]) -> int:
    """Mirror each run or version the entries name (once each), deleting the entries it
    delivered; returns how many it delivered. Raises ``MirrorUnavailableError``."""
    from .models import MirrorOutbox

    mirror = _mirror()
    if mirror is None:
        return 0
    pending: dict[tuple[str, str], list[int]] = {}
    for pk, kind, key in entries:
        pending.setdefault((kind, key), []).append(pk)
    done: list[int] = []
    try:
        for (kind, key), pks in pending.items():
            try:
                _forward(mirror, kind, key)
            except Exception as exc:
                raise MirrorUnavailableError(f"{kind} {key}: {exc}") from exc
            done += pks
    finally:
        if done:
            # Only the entries read: a change committed since has its own, still pending.
            MirrorOutbox.objects.filter(pk__in=done).delete()
    return len(pending)


def high_water() -> int | None:
    """The newest outbox entry's primary key (None when the outbox is empty)."""
    from .models import MirrorOutbox

    return MirrorOutbox.objects.order_by("-pk").values_list("pk", flat=True).first()


def sync(upto: int | None = None) -> int:
    """Mirror every run and version the outbox names, up to entry ``upto`` (default: all
    entries there now); returns how many runs and versions were written.

    Raises:
        MirrorUnavailableError: the mirror failed (logged once per outage); the entries
            not delivered stay in the outbox.
    """
    from .models import MirrorOutbox

    if _mirror() is None:
        return 0
    last = high_water() if upto is None else upto
    if last is None:
        _outage.recovered(0)
        return 0
    total, after = 0, 0
    while True:
        entries = list(MirrorOutbox.objects.filter(pk__gt=after, pk__lte=last).order_by("pk")
                       .values_list("pk", "kind", "key")[:CHUNK])
        if not entries:
            break
        try:
            total += _deliver(entries)
        except MirrorUnavailableError as exc:
            _outage.failed(exc.__cause__ or exc)
            raise
        after = entries[-1][0]
    _outage.recovered(total)
    return total


class _Forwarder(threading.Thread):
    """Mirrors the changes this process committed, off the hot path; while the mirror is
    down, tries every ``RETRY_EVERY`` seconds to catch up the whole outbox."""

    def __init__(self) -> None:
        super().__init__(name="pikku-mirror", daemon=True)
        self.inbox: queue.Queue[Entry] = queue.Queue(BACKLOG_LIMIT)
        self.overflowed = False

    def run(self) -> None:
        while True:
            taken = 0
            notes: list[Entry] = []
            try:
                notes.append(self.inbox.get(timeout=RETRY_EVERY if _outage.down else None))
                taken = 1
                while True:  # coalesce a burst: each run is read and written once
                    notes.append(self.inbox.get_nowait())
                    taken += 1
            except queue.Empty:
                pass
            try:
                if _outage.down or self.overflowed:
                    self.overflowed = False
                    sync()  # the notes' entries among the others in the outbox
                else:
                    _deliver(notes)
            except MirrorUnavailableError as exc:
                _outage.failed(exc.__cause__ or exc)
            except Exception:
                logger.exception("the mirror's outbox could not be read")
            finally:
                connections.close_all()
                for _ in range(taken):
                    self.inbox.task_done()


_forwarder: _Forwarder | None = None
_lock = threading.Lock()
_local = threading.local()


def _get_forwarder() -> _Forwarder:
    global _forwarder
    with _lock:
        if _forwarder is None or not _forwarder.is_alive():
            _forwarder = _Forwarder()
            _forwarder.start()
        return _forwarder


def changed(kind: str, key: object) -> None:
    """Note, inside the current transaction, that a run or version changed: an outbox
    entry (once per transaction), forwarded after commit. No write when no mirror is set.
    Outside a transaction use ``changing``: an entry written after an autocommitted change
    could be lost with the process."""
    if pikku_settings.MIRROR is None:
        return
    from .models import MirrorOutbox

    note = (kind, str(key))
    db = transaction.get_connection(MirrorOutbox.objects.db)
    # The on-commit list is replaced when a transaction (or savepoint) commits or rolls
    # back: while it is the same list, this transaction already has the entry.
    noted: tuple[object, set[tuple[str, str]]] | None = getattr(_local, "noted", None)
    if noted is None or noted[0] is not db.run_on_commit:
        noted = _local.noted = (db.run_on_commit, set())
    if note in noted[1]:
        return
    noted[1].add(note)
    entry = MirrorOutbox.objects.create(kind=kind, key=note[1])
    transaction.on_commit(lambda: _send(entry.pk, *note))


def changing(kind: str, *keys: object) -> AbstractContextManager[object]:
    """Wrap a write to runs (their steps and attempts) or versions so the mirror gets it.

    In a transaction this is ``changed`` after the write. In autocommit each outbox entry
    is written before the write and forwarded after it: a crash in between leaves an
    entry for a row that did not change (mirrored again, harmlessly), where the other
    order could lose a committed change, and a forwarder could read the row too early.
    """
    if pikku_settings.MIRROR is None or not keys:
        return _UNMIRRORED
    return _changing(kind, keys)


_UNMIRRORED = nullcontext()


@contextmanager
def _changing(kind: str, keys: tuple[object, ...]) -> Iterator[None]:
    from .models import MirrorOutbox

    if transaction.get_connection(MirrorOutbox.objects.db).in_atomic_block:
        yield
        for key in keys:
            changed(kind, key)
        return
    entries = [MirrorOutbox.objects.create(kind=kind, key=key)
               for key in dict.fromkeys(map(str, keys))]
    try:
        yield
    finally:
        for entry in entries:
            _send(entry.pk, kind, entry.key)


def _send(pk: int, kind: str, key: str) -> None:
    forwarder = _get_forwarder()
    try:
        forwarder.inbox.put_nowait((pk, kind, key))
    except queue.Full:
        forwarder.overflowed = True  # the entry waits in the outbox: caught up later


def flush(timeout: float = 10.0) -> bool:
    """Wait until the forwarder has handled every note (for tests and shutdown); False on
    timeout."""
    if _forwarder is None:
        return True
    inbox = _forwarder.inbox
    with inbox.all_tasks_done:
        return inbox.all_tasks_done.wait_for(lambda: inbox.unfinished_tasks == 0, timeout)
