"""``manage.py pikku_mirror_sync``: write to the MIRROR every change it has not received."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import pikku_settings
from ...mirror import MirrorUnavailableError, sync
from ...models import MirrorOutbox


class Command(BaseCommand):
    help = ("Catch the MIRROR up: write every run and version its outbox still holds "
            "(changes made while it was down), then exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        if pikku_settings.MIRROR is None:
            raise CommandError('PIKKU_WORKFLOWS["MIRROR"] is not set: nothing to mirror to')
        try:
            count = sync()
        except MirrorUnavailableError as exc:
            left = MirrorOutbox.objects.count()
            raise CommandError(f"the mirror is unavailable ({exc}); "
                               f"{left} outbox entries wait") from exc
        self.stdout.write(f"{count} runs and versions mirrored")
