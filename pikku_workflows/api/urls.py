"""Routes of the REST API; mount with ``path("api/workflows/", include("pikku_workflows.api.urls"))``."""

from __future__ import annotations

from django.urls import URLPattern

app_name = "pikku_workflows_api"

urlpatterns: list[URLPattern] = []
