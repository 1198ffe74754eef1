"""Version rows of workflow definitions: looked up on every start, created once, judged."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from ...mirror import changed, changing
from ...models import WorkflowVersion
from .backends import backend


def version_status(workflow: str, graph_hash: str) -> str | None:
    """The status of the version row of (``workflow``, ``graph_hash``); None if there is
    none (every start asks)."""
    return backend().version_status(workflow, graph_hash)


def ensure_version(workflow: str, graph_hash: str, graph: dict[str, Any], source: str
                   ) -> tuple[WorkflowVersion, bool]:
    """The version row of (``workflow``, ``graph_hash``), created if missing (the first
    write wins); whether it was created."""
    found = WorkflowVersion.objects.filter(workflow=workflow, graph_hash=graph_hash).first()
    if found is not None:
        return found, False
    try:
        # The mirror's entry commits with the row (its pk is not known before). The
        # transaction starts with its write: on SQLite a read first could not upgrade.
        with transaction.atomic():
            version = WorkflowVersion.objects.create(
                workflow=workflow, graph_hash=graph_hash, graph=graph, source=source)
            changed("version", version.pk)
    except IntegrityError:  # another process created it first
        return WorkflowVersion.objects.get(workflow=workflow, graph_hash=graph_hash), False
    return version, True


def set_version_status(version_id: int, status: str) -> None:
    """Accept or decline a workflow version."""
    with changing("version", version_id):
        WorkflowVersion.objects.filter(pk=version_id).update(status=status)
