"""Replay checks over many recorded runs: the ``pikku_replay_check`` command's,
``testing.assert_replays``', the runs export, and the console's runs without a patch."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from .analysis import patch_ids
from .models import WorkflowRun, WorkflowStep
from .registry import registry
from .runtime.dry_replay import Divergence, replay
from .status import RunStatus, WorkflowSource
from .types import RunId

#: Runs whose steps are read in one query.
BATCH = 500
#: What ``export_runs`` writes (``format``), and the version of its layout.
EXPORT_FORMAT = "pikku_workflows.runs"
EXPORT_VERSION = 1
#: The step fields an export keeps: what a replay reads of a step.
_STEP_FIELDS = ("step_name", "rpc_name", "status", "data", "result", "error", "attempt_count",
                "attempt_base", "retries", "retry_delay", "branch_taken", "from_step_name")
_RUN_FIELDS = ("workflow", "status", "input", "state", "wire", "graph_hash")


class Writer(Protocol):
    """Where an export goes: anything with ``write(text)`` (a text file)."""

    def write(self, text: str, /) -> object: ...


@dataclass(frozen=True)
class CheckedRun:
    """One run's replay check.

    Attributes:
        run_id: The run's id.
        workflow: Its workflow's name.
        status: Its status when read.
        divergence: Where the current code diverges from it; None when it replays.
    """

    run_id: str
    workflow: str
    status: str
    divergence: Divergence | None


def runs_to_check(*, workflow: str | None = None, statuses: Sequence[str] = (),
                  since: datetime | None = None, limit: int | None = None
                  ) -> QuerySet[WorkflowRun]:
    """The runs a replay check reads, newest first.

    Args:
        workflow: Only the runs of this workflow.
        statuses: Only runs in these statuses (any when empty).
        since: Only runs created at or after this moment.
        limit: At most this many (the newest).

    Returns:
        The runs, newest first.

    Raises:
        ValueError: An unknown status, or a limit below 1.
    """
    unknown = sorted(set(statuses) - set(RunStatus.values))
    if unknown:
        raise ValueError(f"unknown run status {', '.join(map(repr, unknown))}: expected "
                         f"{', '.join(RunStatus.values)}")
    if limit is not None and limit < 1:
        raise ValueError(f"the limit must be at least 1, not {limit}")
    runs = WorkflowRun.objects.order_by("-created_at", "-pk")
    if workflow:
        runs = runs.filter(workflow=workflow)
    if statuses:
        runs = runs.filter(status__in=list(statuses))
    if since is not None:
        runs = runs.filter(created_at__gte=since)
    return runs[:limit] if limit is not None else runs


def check_runs(runs: Iterable[WorkflowRun], *, as_resumed: bool = False
               ) -> Iterator[CheckedRun]:
    """Replay each run dry (no function called, nothing written), its steps read by batch.

    Args:
        runs: Saved runs (a query set is read once).
        as_resumed: Replay graph runs on the version a pass would resume them on.

    Yields:
        Each run's check, in the order of ``runs``.
    """
    batch: list[WorkflowRun] = []
    for run in runs.iterator(chunk_size=BATCH) if isinstance(runs, QuerySet) else runs:
        batch.append(run)
        if len(batch) == BATCH:
            yield from _check_batch(batch, as_resumed)
            batch = []
    if batch:
        yield from _check_batch(batch, as_resumed)


def _check_batch(runs: list[WorkflowRun], as_resumed: bool) -> Iterator[CheckedRun]:
    steps: dict[Any, list[WorkflowStep]] = defaultdict(list)
    for step in WorkflowStep.objects.filter(run_id__in=[run.pk for run in runs]).order_by("id"):
        steps[step.run_id].append(step)
    for run in runs:
        yield CheckedRun(str(run.pk), run.workflow, run.status,
                         replay(run, steps=steps[run.pk], as_resumed=as_resumed).divergence)


# --- export -----------------------------------------------------------------------------------


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def export_runs(runs: Iterable[WorkflowRun], out: Writer) -> int:
    """Write runs with their steps as JSON that ``read_exported_runs`` reads back.

    Args:
        runs: Saved runs (a query set is read once, by batch).
        out: Where to write the JSON document.

    Returns:
        How many runs were written.
    """
    out.write(json.dumps({"format": EXPORT_FORMAT, "version": EXPORT_VERSION})[:-1]
              + ', "runs": [')
    count = 0
    batch: list[WorkflowRun] = []

    def write(batch: list[WorkflowRun]) -> None:
        nonlocal count
        steps: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        rows = WorkflowStep.objects.filter(run_id__in=[run.pk for run in batch]).order_by("id")
        for step in rows.values("run_id", "wake_at", "child_run_id", *_STEP_FIELDS):
            run_id = step.pop("run_id")
            step["wake_at"] = _when(step["wake_at"])
            step["child_run_id"] = str(step["child_run_id"]) if step["child_run_id"] else None
            steps[run_id].append(step)
        for run in batch:
            record = {"id": str(run.pk), **{name: getattr(run, name) for name in _RUN_FIELDS},
                      "created_at": _when(run.created_at), "steps": steps[run.pk]}
            out.write((",\n" if count else "\n") + json.dumps(record))
            count += 1

    for run in runs.iterator(chunk_size=BATCH) if isinstance(runs, QuerySet) else runs:
        batch.append(run)
        if len(batch) == BATCH:
            write(batch)
            batch = []
    if batch:
        write(batch)
    out.write("\n]}\n")
    return count


@dataclass(frozen=True)
class ExportedRun:
    """A run read from an export: unsaved rows that a dry replay reads as saved ones."""

    run: WorkflowRun
    steps: list[WorkflowStep]


def read_exported_runs(path: str) -> list[ExportedRun]:
    """Read a file ``export_runs`` wrote (``manage.py pikku_export_runs``).

    Args:
        path: The file.

    Returns:
        Its runs, in the file's order.

    Raises:
        ValueError: The file is not such an export (named, with what is wrong).
    """
    try:
        with open(path, encoding="utf-8") as file:
            document = json.load(file)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the runs export {path!r}: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{path!r} is not a runs export of pikku_workflows "
                         "(manage.py pikku_export_runs writes one)")
    if document.get("version") != EXPORT_VERSION:
        raise ValueError(f"{path!r} is a runs export of version {document.get('version')!r}; "
                         f"this release reads version {EXPORT_VERSION}")
    exported = []
    for index, record in enumerate(document.get("runs") or []):
        try:
            run = WorkflowRun(pk=record["id"], **{name: record[name] for name in _RUN_FIELDS})
            steps = [WorkflowStep(run_id=run.pk, wake_at=parse_datetime(s["wake_at"] or "")
                                  if s.get("wake_at") else None,
                                  **{name: s[name] for name in _STEP_FIELDS})
                     for s in record["steps"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path!r}: run number {index + 1} of the export is malformed "
                             f"({exc.__class__.__name__}: {exc})") from None
        exported.append(ExportedRun(run, steps))
    return exported


def check_exported(exported: Iterable[ExportedRun], *, workflow: str | None = None,
                   run_ids: Iterable[RunId] | None = None) -> Iterator[CheckedRun]:
    """Replay exported runs dry through the current code.

    Args:
        exported: What ``read_exported_runs`` returned.
        workflow: Only the runs of this workflow.
        run_ids: Only these runs.

    Yields:
        Each run's check.
    """
    wanted = {str(run_id) for run_id in run_ids} if run_ids is not None else None
    for item in exported:
        run = item.run
        if (workflow and run.workflow != workflow) or (
                wanted is not None and str(run.pk) not in wanted):
            continue
        yield CheckedRun(str(run.pk), run.workflow, run.status,
                         replay(run, steps=item.steps).divergence)


# --- patches ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchReport:
    """A patch of a workflow's deployed code and the live runs that replay without it.

    Attributes:
        patch_id: The ``wf.patched`` id.
        runs_without: The live runs (ids) that take its old path, oldest first.
    """

    patch_id: str
    runs_without: list[str]


@dataclass(frozen=True)
class PatchesOfWorkflow:
    """Per patch of a workflow's deployed code, the live runs still without it.

    Attributes:
        patches: One report per patch, by id.
        checked: How many live runs were replayed.
        more: Whether more live runs exist than were replayed (``limit``).
    """

    patches: list[PatchReport]
    checked: int
    more: bool


def live_runs_without_patches(workflow: str, *, limit: int = 1000) -> PatchesOfWorkflow:
    """Replay the workflow's live runs dry; list per patch those that take its old path.

    A patch's old branch can be deleted once no live run is listed under it.

    Args:
        workflow: The workflow's name.
        limit: Replay at most this many live runs (the oldest).

    Returns:
        The patches of the deployed code, each with its runs: those its body names
        literally (``wf.patched("id")``), and any other the replays met. A body that
        names none is not replayed.
    """
    definition = registry.find_workflow(workflow)
    known: set[str] = set()
    if definition is not None and definition.source == WorkflowSource.DSL and \
            definition.fn is not None:
        known.update(patch_ids(definition.fn))
    if not known:
        return PatchesOfWorkflow([], checked=0, more=False)
    live = list(WorkflowRun.objects.filter(
        workflow=workflow, status__in=[RunStatus.RUNNING, RunStatus.SUSPENDED])
        .order_by("created_at", "pk")[:limit + 1])
    more = len(live) > limit
    live = live[:limit]
    without: dict[str, list[str]] = defaultdict(list)
    for start in range(0, len(live), BATCH):
        batch = live[start:start + BATCH]
        steps: dict[Any, list[WorkflowStep]] = defaultdict(list)
        for step in WorkflowStep.objects.filter(
                run_id__in=[run.pk for run in batch]).order_by("id"):
            steps[step.run_id].append(step)
        for run in batch:
            outcome = replay(run, steps=steps[run.pk])
            known.update(outcome.patches_taken | outcome.patches_skipped)
            for patch in outcome.patches_skipped:
                without[patch].append(str(run.pk))
    return PatchesOfWorkflow(
        [PatchReport(patch, without.get(patch, [])) for patch in sorted(known)],
        checked=len(live), more=more)


__all__ = ["BATCH", "EXPORT_FORMAT", "EXPORT_VERSION", "CheckedRun", "ExportedRun",
           "PatchReport", "PatchesOfWorkflow", "Writer", "check_exported", "check_runs",
           "export_runs", "live_runs_without_patches", "read_exported_runs", "runs_to_check"]
