"""The runs list's banner when runs go to RQ and no ``pikku_worker`` was seen lately."""

from __future__ import annotations

import datetime
from datetime import timedelta
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from ..conf import pikku_settings
from ..executors.rq import connection

SEEN_WITHIN = timedelta(minutes=1)


def worker_banner() -> dict[str, Any] | None:
    """None when all is well (or runs are inline); else the banner's text and link."""
    if pikku_settings.EXECUTOR != "rq":
        return None
    from redis.exceptions import RedisError
    from rq import Worker

    try:
        dashboard = reverse("rq_home")
    except NoReverseMatch:
        dashboard = None
    try:
        workers = Worker.all(connection=connection())
    except RedisError as exc:
        return {"message": f"Redis cannot be reached ({exc.__class__.__name__}): no run "
                           "moves until it is back.", "dashboard": dashboard}
    now = timezone.now()
    alive = [w for w in workers if _seen(w, now)]
    if alive:
        return None
    return {"message": "No pikku_worker has been seen in the last minute: runs wait in "
                       "their queues. Start one with `manage.py pikku_worker`.",
            "dashboard": dashboard}


def _seen(worker: Any, now: Any) -> bool:
    beat = getattr(worker, "last_heartbeat", None)
    if beat is None:
        return False
    if timezone.is_naive(beat):  # RQ keeps UTC times without a zone
        beat = beat.replace(tzinfo=datetime.UTC)
    return bool(now - beat < SEEN_WITHIN)
