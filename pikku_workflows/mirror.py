"""Mirrors: write-only companions that receive every committed run, step, attempt and version.

Set ``PIKKU_WORKFLOWS["MIRROR"]`` to the dotted path of a ``Mirror`` subclass. The
engine only notes which rows changed (after commit); a background thread per process
reads them and calls ``Mirror.write`` for each, so a slow or failing mirror never slows
or fails a workflow: its errors are logged, and a full backlog is dropped with a warning.

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
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, models, transaction

from .conf import pikku_settings

if TYPE_CHECKING:
    from .models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion

    MirroredModel = type[WorkflowRun | WorkflowStep | StepAttempt | WorkflowVersion]

logger = logging.getLogger("pikku_workflows.mirror")

BACKLOG_LIMIT = 10_000


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


class _Forwarder(threading.Thread):
    """Reads changed rows after commit and hands them to the mirror, off the hot path."""

    def __init__(self) -> None:
        super().__init__(name="pikku-mirror", daemon=True)
        self.inbox: queue.Queue[tuple[str, object]] = queue.Queue(BACKLOG_LIMIT)

    def run(self) -> None:
        while True:
            # Coalesce a burst of notes: each run is read and written once per batch.
            pending: OrderedDict[tuple[str, object], None] = OrderedDict()
            pending[self.inbox.get()] = None
            taken = 1
            while not self.inbox.empty():
                pending[self.inbox.get_nowait()] = None
                taken += 1
            for kind, key in pending:
                try:
                    self._forward(kind, key)
                except Exception:
                    logger.exception("the mirror failed to write %s %s", kind, key)
            connections.close_all()
            for _ in range(taken):
                self.inbox.task_done()

    def _forward(self, kind: str, key: object) -> None:
        from .models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion

        target = pikku_settings.MIRROR
        # MIRROR is a Mirror subclass or instance (conf cannot name the class).
        mirror = cast("Mirror | None", target() if isinstance(target, type) else target)
        if mirror is None:
            return
        if kind == "version":
            version = WorkflowVersion.objects.filter(pk=cast(int, key)).first()
            if version is not None:
                mirror.write("version", _row(version))
            return
        run_id = cast(uuid.UUID, key)  # a run's primary key
        run = WorkflowRun.objects.filter(pk=run_id).first()
        if run is None:
            return
        mirror.write("run", _row(run))
        for step in WorkflowStep.objects.filter(run_id=run_id).order_by("id"):
            mirror.write("step", _row(step))
        for attempt in StepAttempt.objects.filter(step__run_id=run_id).order_by("id"):
            mirror.write("attempt", _row(attempt))


_forwarder: _Forwarder | None = None
_lock = threading.Lock()


def _get_forwarder() -> _Forwarder:
    global _forwarder
    with _lock:
        if _forwarder is None or not _forwarder.is_alive():
            _forwarder = _Forwarder()
            _forwarder.start()
        return _forwarder


def changed(kind: str, key: object) -> None:
    """Note that a row changed; the mirror gets it once the transaction commits."""
    if pikku_settings.MIRROR is None:
        return

    def send() -> None:
        try:
            _get_forwarder().inbox.put_nowait((kind, key))
        except queue.Full:
            logger.warning("mirror backlog full: %s %s not mirrored", kind, key)

    transaction.on_commit(send)


def flush(timeout: float = 10.0) -> bool:
    """Wait until the mirror has caught up (for tests and shutdown); False on timeout."""
    if _forwarder is None:
        return True
    inbox = _forwarder.inbox
    with inbox.all_tasks_done:
        return inbox.all_tasks_done.wait_for(lambda: inbox.unfinished_tasks == 0, timeout)
