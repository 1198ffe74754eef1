"""``manage.py pikku_prune --older-than 30d``: delete old finished runs in batches.

It counts the runs to delete first, then reports after each batch (``deleted 2000/5210``).
A run's steps, attempts and child runs go with it; a finished run whose child run still
runs is kept. Schedule ticks older than the cutoff that have no run left (skipped, missed,
or their run deleted) go too, and so do events no live run can still consume and the
messages of finished runs, sent before the cutoff. ``--dry-run`` only counts.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...durations import parse_duration
from ...engine import store
from ...engine.clock import clock
from ...models import WorkflowRun
from ...operations import old_events, old_messages, old_ticks, prune_events, prune_ticks
from ...status import RunStatus


class Command(BaseCommand):
    help = "Delete finished runs (with their steps and attempts) older than a duration."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True, metavar="DURATION",
                            help="age of the runs to delete, by finished_at (e.g. 30d)")
        # Plain strings: the enum members would print as reprs in argparse's errors.
        finished = sorted(RunStatus(status).value for status in RunStatus.terminal())
        parser.add_argument("--status", nargs="+", default=finished, choices=finished,
                            help="which finished statuses to delete (default: all three)")
        parser.add_argument("--batch-size", type=int, default=1000)
        parser.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            age = parse_duration(options["older_than"], what="--older-than")
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        cutoff = clock().after(-age)
        self._prune_runs(cutoff, options)
        self._prune_ticks(cutoff, options)
        self._prune_events(cutoff, options)

    def _prune_runs(self, cutoff: Any, options: dict[str, Any]) -> None:
        # A finished parent whose child still runs is kept: deleting it would delete
        # the live child with it (children go with their parent).
        old = WorkflowRun.objects.filter(
            status__in=options["status"], finished_at__lt=cutoff, parent_run__isnull=True,
        ).exclude(child_runs__status__in=(RunStatus.RUNNING, RunStatus.SUSPENDED))
        total = old.count()
        if not total:
            statuses = options["status"]
            which = ("finished" if set(statuses) == set(RunStatus.terminal())
                     else " or ".join(statuses))
            self.stdout.write(
                f"nothing to delete: no {which} run is older than {options['older_than']}")
            return
        if options["dry_run"]:
            self.stdout.write(f"{total} run(s) would be deleted (dry run: nothing deleted)")
            return
        self.stdout.write(f"{total} run(s) finished before {cutoff.isoformat()}")
        deleted = 0
        kept: set[Any] = set()
        while True:
            # Small batches keep each transaction (and its locks) short on big tables.
            ids = list(old.exclude(pk__in=kept).values_list("pk", flat=True)
                       [: options["batch_size"]])
            if not ids:
                break
            # A live grandchild (below a finished child) keeps its ancestors too.
            live = store.with_live_descendants(ids)
            kept.update(live)
            ids = [pk for pk in ids if pk not in live]
            if not ids:
                continue
            store.delete_runs(ids)
            deleted += len(ids)
            self.stdout.write(f"deleted {deleted}/{max(total, deleted)}")
            self.stdout.flush()
        self.stdout.write(f"deleted {deleted} run(s) finished before {cutoff.isoformat()}")

    def _prune_ticks(self, cutoff: Any, options: dict[str, Any]) -> None:
        total = old_ticks(cutoff).count()
        if not total:
            return
        if options["dry_run"]:
            self.stdout.write(f"{total} schedule tick(s) without a run would be deleted")
            return
        deleted = prune_ticks(cutoff, batch_size=options["batch_size"])
        self.stdout.write(f"deleted {deleted} schedule tick(s) without a run from before "
                          f"{cutoff.isoformat()}")

    def _prune_events(self, cutoff: Any, options: dict[str, Any]) -> None:
        events, messages = old_events(cutoff).count(), old_messages(cutoff).count()
        if not events and not messages:
            return
        if options["dry_run"]:
            self.stdout.write(f"{events} event(s) and {messages} message(s) would be deleted")
            return
        events, messages = prune_events(cutoff, batch_size=options["batch_size"])
        self.stdout.write(f"deleted {events} event(s) no live run can consume and "
                          f"{messages} message(s) of finished runs, from before "
                          f"{cutoff.isoformat()}")
