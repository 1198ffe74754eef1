"""``manage.py demo_seed``: an admin login and a few demo runs, printed."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

import pikku_workflows as pw


class Command(BaseCommand):
    help = "Create the demo admin user and run the demo workflows inline."

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        admin = user_model.objects.filter(username="admin").first()
        if admin is None:
            admin = user_model.objects.create_superuser("admin", "admin@example.com", "admin")
        runs = [
            pw.start_workflow("process_order",
                              {"order_id": 7, "amount": 1200, "skus": ["mug", "tee"]}, owner=admin),
            pw.start_workflow("process_order",
                              {"order_id": 8, "amount": 40, "skus": ["pin"]}, owner=admin),
            pw.start_workflow("declined_order", {"card": "4000-0000"}, owner=admin),
        ]
        for run in runs:
            status = pw.get_run_status(run.pk)
            self.stdout.write(f"\n{run.workflow} {run.pk}: {status['status']}")
            for step in status["steps"]:
                self.stdout.write(f"  - {step['name']}: {step['status']} "
                                  f"({step['attempts']} attempt(s))")
            shown = status["output"] if status["status"] == "completed" else status["error"]
            self.stdout.write("  => " + json.dumps(shown))
        self.stdout.write(self.style.SUCCESS(
            "\nAdmin console: http://127.0.0.1:8000/admin/  (login: admin / admin)\n"
        ))
