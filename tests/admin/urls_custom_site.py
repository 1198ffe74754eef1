"""tests.urls plus the package's admins registered again on a second admin site named
"ops", mounted at /ops/ (a project's own AdminSite beside Django's default one)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests.urls import urlpatterns as base


def pikku_site(name: str) -> admin.AdminSite:
    """A new admin site holding each of the package's ModelAdmins, as a project with its
    own ``AdminSite`` registers them."""
    site = admin.AdminSite(name=name)
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label == "pikku_workflows":
            site.register(model, type(model_admin))
    return site


ops_site = pikku_site("ops")

urlpatterns = [*base, path("ops/", ops_site.urls)]
