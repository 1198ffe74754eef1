"""Routes of the REST API, mounted by the project under a prefix of its choice."""

from __future__ import annotations

from django.urls import URLPattern

app_name = "pikku_workflows_api"

urlpatterns: list[URLPattern] = []
