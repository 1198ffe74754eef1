"""``manage.py pikku_versions``: register the current workflow definitions as versions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ...engine.versions import register_versions


class Command(BaseCommand):
    help = "Register a WorkflowVersion row for each workflow's current definition."

    def handle(self, *args: Any, **options: Any) -> None:
        for version, created in register_versions():
            state = "registered" if created else f"known ({version.status})"
            self.stdout.write(f"{version.workflow}@{version.graph_hash}: {state}")
