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
        # Imported here, not at the top: Django imports apps.py before the models exist.
        from . import checks  # noqa: F401 - registers the system checks
        from .conf import pikku_settings
        from .exceptions import WorkflowConfigurationError
        from .executors import register_executors

        # The engine reaches the executors only through its dispatch port.
        register_executors()

        try:
            metrics = pikku_settings.METRICS
        except WorkflowConfigurationError:
            metrics = False  # reported by `manage.py check` (pikku_workflows.E011)
        if metrics:
            # Prometheus receivers on the engine's signals (ImproperlyConfigured without
            # prometheus-client).
            from .metrics import install

            install()
