"""The fault-injection suite's app: its workflows and the ledger its atomic steps write."""

from django.apps import AppConfig


class FaultsConfig(AppConfig):
    name = "tests.faults"
    label = "faults"
    default_auto_field = "django.db.models.BigAutoField"
