"""Workflow versions: one immutable row per (workflow, graph hash); first write wins."""

from __future__ import annotations

from typing import Any

from ..exceptions import WorkflowVersionDeclinedError
from ..models import WorkflowVersion
from ..registry import registry
from ..status import VersionStatus, WorkflowSource
from . import store


def version_graph(definition: Any) -> dict[str, Any]:
    """What a version row stores about a definition."""
    analysis = definition.analysis
    graph = {
        "name": definition.name, "source": definition.source,
        "description": definition.description, "tags": list(definition.tags),
        "deterministic": analysis.deterministic, "planned_steps": analysis.planned_steps,
        **analysis.graph,
    }
    if definition.source == WorkflowSource.GRAPH:
        graph["definition"] = definition.to_json()  # enough to run it after a deploy
    return graph


def ensure_version(definition: Any) -> tuple[WorkflowVersion, bool]:
    """The version row of the definition's current hash, created if missing."""
    return store.ensure_version(definition.name, definition.graph_hash,
                                version_graph(definition), definition.source)


def check_startable(definition: Any) -> None:
    """Refuse new runs of a declined version (and register the version if new).

    Raises:
        WorkflowVersionDeclinedError: The current version is declined.
    """
    status = store.version_status(definition.name, definition.graph_hash)
    if status is None:
        status = ensure_version(definition)[0].status
    if status == VersionStatus.DECLINED:
        raise WorkflowVersionDeclinedError(
            f"version {definition.graph_hash} of workflow '{definition.name}' is declined: "
            "it accepts no new runs"
        )


def register_versions() -> list[tuple[WorkflowVersion, bool]]:
    """Register every workflow's current version; returns (row, created) pairs."""
    return [ensure_version(definition) for definition in registry.workflows()]
