"""The package's admins on the "ops" site alone: the default site mounted at /admin/
holds none of them (``reverse("admin:pikku_workflows_...")`` finds no such URL there)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests.admin.urls_custom_site import ops_site
from tests.urls import urlpatterns as base

urlpatterns = [*(p for p in base if str(p.pattern) != "admin/"),
               path("admin/", admin.AdminSite(name="admin").urls),
               path("ops/", ops_site.urls)]
