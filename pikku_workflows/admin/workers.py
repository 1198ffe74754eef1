"""The runs list's banner when runs go to RQ and no ``pikku_worker`` is alive."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse

from ..conf import pikku_settings
from ..executors.rq import worker_health

#: The django-rq dashboard's URL names, newest first: django-rq 4's namespaced
#: ``include("django_rq.urls")``, the dashboard it adds to the admin itself, and the
#: un-namespaced name of django-rq before 3.
DASHBOARD_URL_NAMES = ("django_rq:home", "admin:django_rq_home", "rq_home")


def worker_banner() -> dict[str, Any] | None:
    """None when all is well (or runs are inline); else the banner's text and link.

    A worker counts while RQ holds it alive: its key in Redis, which each heartbeat keeps
    for the worker's TTL + 60 s, and which a worker that stops cleanly removes from RQ's
    worker registry. ``pikku_worker``'s TTL is ``WORKER_TTL`` (so an idle one beats every
    ``WORKER_TTL - 15`` s); one killed without a goodbye stops counting when its key
    lapses. Only workers serving one of the workflow queues count.
    """
    if pikku_settings.EXECUTOR != "rq":
        return None
    from redis.exceptions import RedisError

    dashboard = dashboard_url()
    try:
        alive = worker_health()
    except RedisError as exc:
        return {"message": f"Redis cannot be reached ({exc.__class__.__name__}): no run "
                           "moves until it is back.", "dashboard": dashboard}
    if alive:
        return None
    return {"message": "No pikku_worker is running (none is alive in RQ's worker "
                       "registry): runs wait in their queues. Start one with "
                       "`manage.py pikku_worker`.",
            "dashboard": dashboard}


def dashboard_url() -> str | None:
    """The django-rq dashboard's URL when the project installed its URLs, else None."""
    for name in DASHBOARD_URL_NAMES:
        try:
            return reverse(name)
        except NoReverseMatch:
            continue
    return None
