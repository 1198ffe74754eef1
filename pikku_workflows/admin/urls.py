"""URLs of the console's per-object views (an action, a form) beside the admin's own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse

#: The admin site's name when none is known (Django's default site): the package's
#: command-line drawings, which no request reaches.
DEFAULT_SITE = "admin"


def console_url(site: str, view: str, *args: object) -> str:
    """The URL of the console view ``view`` on the admin site named ``site``.

    Every admin site's URLs share the application namespace ``admin``; the site's name
    (its instance namespace, ``AdminSite(name=...)``) picks the site, as Django's own admin
    views reverse theirs. A project that mounts the package's ModelAdmins on its own site
    gets links to that site, not to the default one.

    Args:
        site: The admin site's name: ``model_admin.admin_site.name``, or a request's
            ``current_app`` / resolver namespace where no ModelAdmin is at hand.
        view: The view's name without the ``pikku_workflows_`` prefix
            (``"workflowrun_change"``).
        *args: The view's URL arguments (an object's id).

    Returns:
        The URL's path.
    """
    return reverse(f"admin:pikku_workflows_{view}", args=args, current_app=site)


def object_urls(model_admin: admin.ModelAdmin[Any],
                views: Mapping[str, Callable[[HttpRequest, str], HttpResponse]]
                ) -> list[URLPattern]:
    """``<object_id>/<name>/`` for each view, named ``<app>_<model>_<name>`` and served
    behind the admin site's login and CSRF checks."""
    app, model = model_admin.opts.app_label, model_admin.opts.model_name
    return [path(f"<path:object_id>/{name}/", model_admin.admin_site.admin_view(view),
                 name=f"{app}_{model}_{name}") for name, view in views.items()]
