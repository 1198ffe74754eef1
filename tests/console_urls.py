"""The URL names of the package's admin pages on an admin site (console-wide tests)."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.urls import URLPattern, URLResolver


def console_url_names(site: AdminSite) -> list[str]:
    """Every ``pikku_workflows_...`` URL name ``site`` serves, in its order."""
    names: list[str] = []

    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern) and (pattern.name or "").startswith(
                    "pikku_workflows_"):
                names.append(pattern.name)

    walk(site.get_urls())
    return names
