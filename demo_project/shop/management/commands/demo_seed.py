"""``manage.py demo_seed``: the demo users and one run of each demo example, printed."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

import pikku_workflows as pw
from demo_project.shop.workflows import EXAMPLES

#: What the demo's manager may do: see runs and events, and approve (order_saga's gate
#: asks for it).
MANAGER_PERMISSIONS = ("view_workflowrun", "view_registeredworkflow", "approve_workflowrun",
                       "view_workflowevent")

#: The demo admin's API token (the demo's only: never a fixed key in a real project).
DEMO_TOKEN = "pikku-demo-admin-token-not-a-secret"


class Command(BaseCommand):
    help = ("Create the demo users (admin/admin, a superuser who starts the orders; "
            "manager/manager, staff who approves large ones) and start each demo example.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--inline", action="store_true",
                            help="run the examples in this process whatever EXECUTOR says")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        admin = users.filter(username="admin").first() or users.create_superuser(
            "admin", "admin@example.com", "admin")
        manager = users.filter(username="manager").first() or users.create_user(
            "manager", "manager@example.com", "manager")
        # Staff who may see runs and approve: not a superuser, so the approval policy of
        # order_saga (a permission, not the initiator) is what lets them approve.
        manager.is_staff, manager.is_superuser = True, False
        manager.save(update_fields=["is_staff", "is_superuser"])
        manager.user_permissions.add(*Permission.objects.filter(
            content_type__app_label="pikku_workflows", codename__in=MANAGER_PERMISSIONS))
        # An API token for scripts (docs/api.md, "Authenticating services"): a fixed key,
        # since this is a demo; real tokens come from `manage.py drf_create_token`.
        Token.objects.get_or_create(user=admin, defaults={"key": DEMO_TOKEN})
        self.stdout.write(f"API token of admin: {DEMO_TOKEN}")
        inline = True if options["inline"] else None
        for name, label, data in EXAMPLES:
            run = pw.start_workflow(name, data, owner=admin, inline=inline)
            status = pw.get_run_status(run.pk)
            self.stdout.write(f"\n{label}\n{run.workflow} {run.pk}: {status['status']}")
            for step in status["steps"]:
                self.stdout.write(f"  - {step['name']}: {step['status']} "
                                  f"({step['attempts']} attempt(s))")
            if status["status"] == "completed":
                self.stdout.write("  => " + json.dumps(status["output"]))
            elif status["error"]:
                self.stdout.write("  => " + json.dumps(status["error"]))
