"""``manage.py pikku_recover``: one recovery sweep (undispatched, stalled, due, dead leases)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand

from ...runtime.recovery import sweep


class Command(BaseCommand):
    help = "Re-drive runs whose work was lost: one pass of every recovery sweep."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps(sweep()))
