"""Routes of the REST API, mounted by the project under a prefix of its choice::

    path("api/workflows/", include("pikku_workflows.api.urls")),

Each route answers with and without its trailing slash (a ``POST runs/{id}/cancel`` is
not redirected into a 405), and any other path under ``workflows/``, ``runs/``,
``approvals/``, ``schedules/`` or ``events/`` is the API's JSON 404, not Django's HTML page.
"""

from __future__ import annotations

from django.urls import re_path
from rest_framework.routers import SimpleRouter

from .events import EventViewSet
from .params import unknown_route
from .schedules import ScheduleViewSet
from .views import ApprovalViewSet, RunViewSet, WorkflowViewSet

app_name = "pikku_workflows_api"

router = SimpleRouter()
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("runs", RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("events", EventViewSet, basename="event")

urlpatterns = [
    *router.urls,
    # Paths without their trailing slash, and unknown ones (a JSON 404). Only the API's
    # own prefixes: mounted at the root, it must not hide the project's URLs.
    re_path(r"^(?:workflows|runs|approvals|schedules|events)(?:/.*)?$", unknown_route,
            name="unknown-route"),
]
