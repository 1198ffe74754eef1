"""The run detail and its parts as plain typed dicts, built without Django REST framework.

``get_run_status``, the REST API (whose serializers in ``pikku_workflows.api.serializers``
describe these same dicts in the OpenAPI schema) and the admin's downloaded history all
render runs, steps and attempts with these functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

from django.utils import timezone

from ..models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion
from ..registry import registry
from ..status import RunStatus, StepKind, SuspensionCode, WorkflowSource
from ..step_keys import (
    COMPENSATION_SUFFIX,
    GATE_KINDS,
    PATCH_PREFIX,
    approval_wait,
    public_step_name,
    step_label,
)
from ..types import JSONObject, UserJSON


class StepNames(TypedDict):
    """How every surface names a step: ``name`` (unique in the run), ``label``, ``kind``."""

    name: str
    label: str
    kind: str


class StepSummary(TypedDict):
    """A step as the run detail lists it (``attempts`` is a number)."""

    name: str
    label: str
    kind: str
    status: str
    attempts: int
    rpc_name: str | None
    duration_ms: int | None
    branch_taken: str | None
    child_run: str | None


class RunDetail(TypedDict):
    """The run detail: ``get_run_status``'s dict and the REST API's ``GET runs/{id}/``."""

    id: str
    workflow: str
    status: str
    input: UserJSON
    output: UserJSON
    error: JSONObject | None
    owner: int | None
    parent_run: str | None
    graph_hash: str
    inline: bool
    created_at: str | None
    updated_at: str | None
    finished_at: str | None
    steps: list[StepSummary]


class StepRecord(TypedDict):
    """A step with its data, result and error (``runs/{id}/steps/``, a downloaded
    history)."""

    name: str
    label: str
    kind: str
    status: str
    rpc_name: str | None
    data: UserJSON
    result: UserJSON
    error: JSONObject | None
    attempts: int
    branch_taken: str | None
    child_run: str | None
    from_step_name: str | None
    created_at: str | None
    updated_at: str | None


class AttemptRecord(TypedDict):
    """One attempt of a step (``runs/{id}/history/``, a downloaded history)."""

    step: str
    label: str
    kind: str
    attempt: int
    status: str
    result: UserJSON
    error: JSONObject | None
    created_at: str | None
    running_at: str | None
    succeeded_at: str | None
    failed_at: str | None


#: The columns of a step row :func:`step_record` reads (``QuerySet.values``).
STEP_RECORD_COLUMNS = ("step_name", "status", "rpc_name", "data", "result", "error",
                       "attempt_count", "branch_taken", "child_run_id", "from_step_name",
                       "created_at", "updated_at")
#: The columns of an attempt row :func:`attempt_record` reads (``QuerySet.values``).
ATTEMPT_RECORD_COLUMNS = ("step__step_name", "step__rpc_name", "step__child_run_id",
                          "step__data__duration", "step__data__wait", "attempt", "status",
                          "result", "error",
                          "created_at", "running_at", "succeeded_at", "failed_at")


def step_duration_ms(step: WorkflowStep, attempts: list[StepAttempt]) -> int | None:
    """Time of the latest attempt, from running (or creation) to its end.

    Args:
        step: The step (unused; kept for the callers that pass it).
        attempts: Its attempts, oldest first.

    Returns:
        Milliseconds, or None while the latest attempt has not ended (or there is none).
    """
    if not attempts:
        return None
    last = attempts[-1]
    return attempt_duration_ms(last.created_at, last.running_at, last.succeeded_at,
                               last.failed_at)


def attempt_duration_ms(created_at: datetime, running_at: datetime | None,
                        succeeded_at: datetime | None, failed_at: datetime | None
                        ) -> int | None:
    """An attempt's time from running (or creation) to its end.

    Args:
        created_at: When the attempt was created.
        running_at: When it started running, if it did.
        succeeded_at: When it succeeded, if it did.
        failed_at: When it failed, if it did.

    Returns:
        Milliseconds, or None while it has not ended.
    """
    end = succeeded_at or failed_at
    if end is None:
        return None
    return round((end - (running_at or created_at)).total_seconds() * 1000)


def step_kind(key: str, *, rpc_name: str | None, child_run: object, data: object,
              graph: bool = False) -> StepKind:
    """What the step is, from its row alone: the one rule of every surface.

    Gates by their key (``__workflow_approval:``, ``__workflow_suspend:``), patch markers
    by theirs (``__workflow_patch:``, written by ``wf.patched``), compensations
    by theirs (``<key>:onError``), child runs by ``child_run`` (or an ``rpc_name`` that is
    a registered workflow), sleeps and inline closures by having no ``rpc_name`` (a sleep
    records ``{"duration": seconds}`` as its data, a closure none); the rest, graph nodes
    included, are ``step``; a wait for an event or a message (``wf.wait_for_event``,
    ``wf.recv``, a graph node's ``wait_for_event``) records ``{"wait": "event"}`` or
    ``{"wait": "message"}`` in its data: kinds ``event`` and ``message``.

    Args:
        key: The physical step key.
        rpc_name: The step's function (or child workflow), None for closures and sleeps.
        child_run: The child run's id, or None.
        data: The step's data; only its ``duration`` and ``wait`` keys are read (a
            caller may pass ``{"duration": ..., "wait": ...}`` alone).
        graph: Whether the run is a graph run.

    Returns:
        The step's ``kind``.
    """
    if not graph:
        for prefix, kind in GATE_KINDS.items():
            if key.startswith(prefix):
                return kind
        if key.endswith(COMPENSATION_SUFFIX):
            return StepKind.COMPENSATION
        if key.startswith(PATCH_PREFIX):
            return StepKind.PATCH
    if child_run is None and not rpc_name and isinstance(data, dict):
        wait = data.get("wait")
        if wait == StepKind.EVENT:
            return StepKind.EVENT
        if wait == StepKind.MESSAGE:
            return StepKind.MESSAGE
    if child_run is not None or (rpc_name and registry.find_workflow(rpc_name) is not None):
        return StepKind.CHILD
    if graph or rpc_name:
        return StepKind.STEP
    if isinstance(data, dict) and data.get("duration") is not None:
        return StepKind.SLEEP
    return StepKind.CLOSURE


def step_names(key: str, *, rpc_name: str | None, child_run: object, data: object,
               graph: bool = False) -> StepNames:
    """``{name, label, kind}`` of a step row (:func:`public_step_name`,
    :func:`step_label`, :func:`step_kind`).

    Args:
        key: The physical step key.
        rpc_name: The step's function (or child workflow), None for closures and sleeps.
        child_run: The child run's id, or None.
        data: The step's data (only its ``duration`` key is read).
        graph: Whether the run is a graph run.

    Returns:
        The step's names and kind.
    """
    return {"name": public_step_name(key), "label": step_label(key, graph=graph),
            "kind": step_kind(key, rpc_name=rpc_name, child_run=child_run, data=data,
                              graph=graph).value}


def is_graph_run(workflow: str, graph_hash: str = "") -> bool:
    """Whether runs of ``workflow`` are graph runs: from the registry, or for a workflow
    no longer registered from its recorded version (one query).

    Args:
        workflow: The run's workflow name.
        graph_hash: The run's ``graph_hash``.

    Returns:
        True for a graph workflow's run.
    """
    definition = registry.find_workflow(workflow)
    if definition is not None:
        return bool(definition.source == WorkflowSource.GRAPH)
    source = WorkflowVersion.objects.filter(workflow=workflow, graph_hash=graph_hash) \
        .values_list("source", flat=True).first()
    return source == WorkflowSource.GRAPH


#: The keys a waiting run's error adds (``WAITING_FOR_EVENT``, ``WAITING_FOR_MESSAGE``, a
#: suspend with a timeout), kept by :func:`public_error`.
WAIT_ERROR_KEYS = ("event", "key", "topic", "timeout_at")


def public_error(error: JSONObject | None) -> JSONObject | None:
    """The error as API users see it: message, code and step (and what a waiting run
    waits for: ``event``, ``key``, ``topic``, ``timeout_at``); never a traceback."""
    if not error:
        return None
    public: JSONObject = {k: error[k] for k in ("message", "code", "step") if k in error}
    # What a waiting run waits for (DESIGN section 8.2): the event and its key, or the
    # topic, and until when.
    public.update({k: error[k] for k in WAIT_ERROR_KEYS if k in error})
    if approval_wait(error) is not None:
        # Older releases said WORKFLOW_SUSPENDED at approval gates too (step_keys).
        public["code"] = SuspensionCode.WAITING_FOR_APPROVAL.value
    step = public.get("step")
    if isinstance(step, str):
        public["step"] = public_step_name(step)
    return public


def iso(moment: datetime | None) -> str | None:
    """A timestamp in ISO 8601, in the project's ``TIME_ZONE`` (as DRF renders them)."""
    return timezone.localtime(moment).isoformat() if moment else None


def step_summaries(run_id: uuid.UUID, *, graph: bool = False) -> list[StepSummary]:
    """The run detail's step list from plain rows (two queries, no model instances).

    Args:
        run_id: The run.
        graph: Whether it is a graph run (:func:`is_graph_run`: labels and kinds).

    Returns:
        One dict per step, in the order they were recorded.
    """
    last_attempts = {  # ordered by attempt: the last one wins
        attempt["step_id"]: attempt for attempt in StepAttempt.objects.filter(
            step__run_id=run_id).order_by("step_id", "attempt").values(
            "step_id", "created_at", "running_at", "succeeded_at", "failed_at")}
    summaries: list[StepSummary] = []
    for step in WorkflowStep.objects.filter(run_id=run_id).order_by("id").values(
            "id", "step_name", "status", "attempt_count", "rpc_name", "branch_taken",
            # A sleep's duration and a wait's kind: the step's kind, not its data.
            "child_run_id", "data__duration", "data__wait"):
        last = last_attempts.get(step["id"])
        duration = None if last is None else attempt_duration_ms(
            last["created_at"], last["running_at"], last["succeeded_at"], last["failed_at"])
        names = step_names(step["step_name"], rpc_name=step["rpc_name"],
                           child_run=step["child_run_id"],
                           data={"duration": step["data__duration"],
                                 "wait": step["data__wait"]}, graph=graph)
        summaries.append({
            "name": names["name"], "label": names["label"], "kind": names["kind"],
            "status": step["status"],
            "attempts": step["attempt_count"], "rpc_name": step["rpc_name"],
            "duration_ms": duration, "branch_taken": step["branch_taken"],
            "child_run": _uuid_text(step["child_run_id"]),
        })
    return summaries


def run_detail(run: WorkflowRun) -> RunDetail:
    """The run detail, JSON-ready: ``get_run_status``'s dict, the same as
    ``GET runs/{id}/`` (``output`` is null unless the run completed).

    Args:
        run: The run.

    Returns:
        A plain dict (three queries: the version's source when its workflow is no longer
        registered, the steps, their attempts).
    """
    graph = is_graph_run(run.workflow, run.graph_hash)
    return {
        "id": str(run.pk),
        "workflow": run.workflow,
        "status": str(run.status),
        "input": run.input,
        "output": run.output if run.status == RunStatus.COMPLETED else None,
        "error": public_error(run.error),
        "owner": run.owner_id,
        "parent_run": _uuid_text(run.parent_run_id),
        "graph_hash": run.graph_hash,
        "inline": bool(run.inline),
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "finished_at": iso(run.finished_at),
        "steps": step_summaries(run.pk, graph=graph),
    }


def step_record(row: Mapping[str, Any], *, graph: bool = False) -> StepRecord:
    """A step's row (:data:`STEP_RECORD_COLUMNS` of ``WorkflowStep.objects.values``) as
    the REST API's ``runs/{id}/steps/`` and a downloaded history show it.

    Args:
        row: The step's values.
        graph: Whether the run is a graph run (labels and kinds).

    Returns:
        The step, JSON-ready (public errors: no traceback).
    """
    names = step_names(row["step_name"], rpc_name=row["rpc_name"],
                       child_run=row["child_run_id"], data=row["data"], graph=graph)
    return {
        "name": names["name"], "label": names["label"], "kind": names["kind"],
        "status": row["status"], "rpc_name": row["rpc_name"],
        "data": row["data"], "result": row["result"], "error": public_error(row["error"]),
        "attempts": row["attempt_count"], "branch_taken": row["branch_taken"],
        "child_run": _uuid_text(row["child_run_id"]),
        "from_step_name": public_step_name(row["from_step_name"])
        if row["from_step_name"] is not None else None,
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def attempt_record(row: Mapping[str, Any], *, graph: bool = False) -> AttemptRecord:
    """An attempt's row (:data:`ATTEMPT_RECORD_COLUMNS` of ``StepAttempt.objects.values``)
    as the REST API's ``runs/{id}/history/`` and a downloaded history show it.

    Args:
        row: The attempt's values, its step's name, function, child run and sleep
            duration included.
        graph: Whether the run is a graph run (labels and kinds).

    Returns:
        The attempt, JSON-ready (public errors: no traceback).
    """
    names = step_names(row["step__step_name"], rpc_name=row["step__rpc_name"],
                       child_run=row["step__child_run_id"],
                       data={"duration": row["step__data__duration"],
                             "wait": row["step__data__wait"]}, graph=graph)
    return {
        "step": names["name"], "label": names["label"], "kind": names["kind"],
        "attempt": row["attempt"], "status": row["status"],
        "result": row["result"], "error": public_error(row["error"]),
        "created_at": iso(row["created_at"]), "running_at": iso(row["running_at"]),
        "succeeded_at": iso(row["succeeded_at"]), "failed_at": iso(row["failed_at"]),
    }


def _uuid_text(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None
