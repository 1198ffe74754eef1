"""The Django app: autodiscovers every installed app's ``workflows`` module."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class PikkuWorkflowsConfig(AppConfig):
    name = "pikku_workflows"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        autodiscover_modules("workflows")
