"""Workflow versions: one immutable row per (workflow, graph hash); first write wins."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
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


def package_version() -> str:
    """The installed pikku-workflows distribution's version ("unknown" when it is not
    installed as a distribution, e.g. a copy on ``sys.path``)."""
    try:
        return metadata.version("pikku-workflows")
    except metadata.PackageNotFoundError:
        return "unknown"


def definitions_fingerprint() -> str:
    """12 hex digits naming the registered definitions: each workflow's name, graph hash
    and queue, each function's name, queue and whether it is queued. Two processes with the
    same fingerprint run the same workflow versions on the same queues."""
    entries = [["workflow", d.name, d.graph_hash, d.queue or ""]
               for d in registry.workflows()]
    entries += [["function", f.name, f.queue or "", "queued" if f.queued else ""]
                for f in registry.functions()]
    text = json.dumps(entries, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
