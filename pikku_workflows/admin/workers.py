"""The console's Workers and queues page and the runs list's "no worker" banner, both on
``executors.rq.worker_health``: one rule of which ``pikku_worker`` is alive."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from redis.exceptions import RedisError

from ..conf import pikku_settings
from ..engine.clock import clock
from ..engine.dispatch import (
    all_queue_names,
    orchestrator_queue_name,
    step_queue_name,
    wake_queue_name,
)
from ..engine.versions import definitions_fingerprint, package_version
from ..executors.rq import CurrentJob, LiveWorker, QueueStats, queue_stats, worker_health
from ..models import WorkflowRun
from ..registry import registry
from .urls import DEFAULT_SITE, console_url

if TYPE_CHECKING:
    # Django's ModelAdmin takes no type argument at run time.
    _RunAdminBase = admin.ModelAdmin[WorkflowRun]
else:
    _RunAdminBase = admin.ModelAdmin

#: The django-rq dashboard's URL names, newest first: django-rq 4's namespaced
#: ``include("django_rq.urls")``, the dashboard it adds to the admin itself, and the
#: un-namespaced name of django-rq before 3.
DASHBOARD_URL_NAMES = ("django_rq:home", "admin:django_rq_home", "rq_home")
#: The page's view (under the runs admin: ``<site>/pikku_workflows/workflowrun/workers/``).
WORKERS_VIEW = "workflowrun_workers"


def worker_banner(site: str = DEFAULT_SITE) -> dict[str, Any] | None:
    """None when all is well (or runs are inline); else the banner's text and links (to
    the Workers page of the admin site named ``site``).

    A worker counts while RQ holds it alive (``worker_health``): its key in Redis, which
    each heartbeat keeps for the worker's TTL + 60 s, and which a worker that stops
    cleanly removes from RQ's worker registry. ``pikku_worker``'s TTL is ``WORKER_TTL``
    (so an idle one beats every ``WORKER_TTL - 15`` s); one killed without a goodbye
    stops counting when its key lapses. Only workers serving one of the workflow queues
    count.
    """
    if pikku_settings.EXECUTOR != "rq":
        return None
    links = {"dashboard": dashboard_url(site), "workers": console_url(site, WORKERS_VIEW)}
    try:
        alive = worker_health()
    except RedisError as exc:
        return {"message": f"Redis cannot be reached ({exc.__class__.__name__}): no run "
                           "moves until it is back.", **links}
    if alive:
        return None
    return {"message": "No pikku_worker is running (none is alive in RQ's worker "
                       "registry): runs wait in their queues. Start one with "
                       "`manage.py pikku_worker`.", **links}


def dashboard_url(site: str = DEFAULT_SITE) -> str | None:
    """The django-rq dashboard's URL when the project installed its URLs, else None: on
    the admin site named ``site`` if django-rq added its page there, else wherever it
    did (the default site's)."""
    for current_app in (site, None):
        for name in DASHBOARD_URL_NAMES:
            try:
                return reverse(name, current_app=current_app)
            except NoReverseMatch:
                continue
    return None


# --- the Workers and queues page -----------------------------------------------------------


def queue_users() -> dict[str, list[str]]:
    """The queues the registered definitions send jobs to, each with who sends them: a
    workflow's passes (its orchestrator queue, and that queue's wake-up queue), a queued
    function's steps."""
    users: dict[str, list[str]] = {}
    for workflow in registry.workflows():
        queue = orchestrator_queue_name(workflow.name)
        for name in (wake_queue_name(queue), queue):
            users.setdefault(name, []).append(f"workflow {workflow.name}")
    for function in registry.functions():
        if function.queued:
            users.setdefault(step_queue_name(function.name), []).append(
                f"function {function.name}")
    return users


def _age(now: datetime, then: datetime | None) -> int | None:
    """Whole seconds from ``then`` to ``now`` (0 if ``then`` is later; None without it)."""
    return None if then is None else max(int((now - then).total_seconds()), 0)


def _run_url(run_id: str | None, site: str) -> str:
    try:
        valid = uuid.UUID(str(run_id))
    except ValueError:
        return ""  # a job naming no run (wake-ups), or a forged id
    return console_url(site, "workflowrun_change", valid)


def _job_row(job: CurrentJob, now: datetime, site: str) -> dict[str, Any]:
    return {**job, "run_url": _run_url(job["run_id"], site) if job["run_id"] else "",
            "running_seconds": _age(now, job["started_at"])}


def worker_rows(workers: list[LiveWorker], now: datetime, site: str = DEFAULT_SITE
                ) -> list[dict[str, Any]]:
    """The page's workers: each live worker, how long since its heartbeat, its current
    jobs (with their runs' pages on the admin site named ``site``), and whether it runs
    this process's code."""
    version, definitions = package_version(), definitions_fingerprint()
    rows = []
    for worker in sorted(workers, key=lambda w: (w["hostname"] or "", w["pid"] or 0)):
        rows.append({
            **worker,
            "heartbeat_seconds": _age(now, worker["last_heartbeat"]),
            "jobs": [_job_row(job, now, site) for job in worker["current_jobs"]],
            "pikku": worker["version"] is not None,
            "same_code": (worker["version"], worker["definitions"]) == (version, definitions),
        })
    return rows


def queue_rows(stats: list[QueueStats], workers: list[LiveWorker], now: datetime,
               users: dict[str, list[str]]) -> list[dict[str, Any]]:
    """One row per workflow queue: its backlog, the live workers consuming it, who uses
    it, and ``warning`` when it is used and no live worker consumes it."""
    rows = []
    for queue in stats:
        consumers = [w["name"] for w in workers if queue["name"] in w["queues"]]
        used_by = users.get(queue["name"], [])
        due = queue["next_scheduled_at"]
        rows.append({
            **queue, "consumers": consumers, "used_by": used_by,
            "warning": bool(used_by) and not consumers,
            "oldest_seconds": _age(now, queue["oldest_enqueued_at"]),
            # Seconds until the next scheduled job is due, or since it was (a due job
            # waits for a worker's scheduler to move it to the queue).
            "next_scheduled_seconds": _age(due, now) if due is not None else None,
            "overdue_seconds": _age(now, due),
        })
    return rows


def workers_page(now: datetime, site: str = DEFAULT_SITE) -> dict[str, Any]:
    """What the page shows: the executor's note, or Redis's error, or the workers and the
    queues (every read from Redis; the database is not queried); links on the admin site
    named ``site``."""
    executor = pikku_settings.EXECUTOR
    context: dict[str, Any] = {"executor": executor, "dashboard": dashboard_url(site)}
    if executor != "rq":
        return context
    try:
        workers = worker_health(details=True)
        stats = queue_stats(all_queue_names())
    except RedisError as exc:
        context["redis_error"] = f"{exc.__class__.__name__}: {exc}"
        return context
    queues = queue_rows(stats, workers, now, queue_users())
    context.update(workers=worker_rows(workers, now, site), queues=queues,
                   warnings=[q for q in queues if q["warning"]],
                   version=package_version(), definitions=definitions_fingerprint())
    return context


class WorkersPageMixin(_RunAdminBase):
    """The Workers and queues page beside the runs list (put before the ModelAdmin in the
    bases): whoever may view runs may view it."""

    def get_urls(self) -> list[URLPattern]:
        # Before the run page's ``<path:object_id>/``, which would take "workers".
        return [path("workers/", self.admin_site.admin_view(self.workers_view),
                     name="pikku_workflows_workflowrun_workers"), *super().get_urls()]

    def workers_view(self, request: HttpRequest) -> HttpResponse:
        """Every live ``pikku_worker`` and every workflow queue's backlog (GET only)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        context = {**self.admin_site.each_context(request), "opts": self.opts,
                   "title": "Workers and queues",
                   **workers_page(clock().now(), self.admin_site.name)}
        return TemplateResponse(request, "admin/pikku_workflows/workflowrun/workers.html",
                                context)
