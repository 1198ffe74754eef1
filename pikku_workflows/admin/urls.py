"""URLs of the console's per-object views (an action, a form) beside the admin's own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path


def object_urls(model_admin: admin.ModelAdmin[Any],
                views: Mapping[str, Callable[[HttpRequest, str], HttpResponse]]
                ) -> list[URLPattern]:
    """``<object_id>/<name>/`` for each view, named ``<app>_<model>_<name>`` and served
    behind the admin site's login and CSRF checks."""
    app, model = model_admin.opts.app_label, model_admin.opts.model_name
    return [path(f"<path:object_id>/{name}/", model_admin.admin_site.admin_view(view),
                 name=f"{app}_{model}_{name}") for name, view in views.items()]
