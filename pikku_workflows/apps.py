"""The Django app: autodiscovers every installed app's ``workflows`` module."""

from __future__ import annotations

from django.apps import AppConfig, apps
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

        from django.db.models.signals import post_migrate

        if "django.contrib.admin" in {app.name for app in apps.get_app_configs()}:
            from .run_audit import ensure_admin_log_index

            # Once per migrate, after every app's migrations (the admin's table included).
            post_migrate.connect(ensure_admin_log_index, sender=self,
                                 dispatch_uid="pikku_admin_log_index")

        try:
            metrics = pikku_settings.METRICS
        except WorkflowConfigurationError:
            metrics = False  # reported by `manage.py check` (pikku_workflows.E011)
        if metrics:
            # Prometheus receivers on the engine's signals (ImproperlyConfigured without
            # prometheus-client).
            from .metrics import install

            install()
        try:
            tracing, alerts = pikku_settings.TRACING, pikku_settings.ALERTS
        except WorkflowConfigurationError:
            tracing, alerts = False, None  # reported by `manage.py check` (E011)
        if tracing:
            # The OpenTelemetry tracer into the engine's hook points (ImproperlyConfigured
            # without opentelemetry-api).
            from . import tracing as tracing_module

            tracing_module.install()
        if alerts is not None:
            from . import alerts as alerts_module

            alerts_module.install()
