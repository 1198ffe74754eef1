"""A run's history as one JSON document, in the REST API's shapes, streamed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet

from ..engine.summary import (
    ATTEMPT_RECORD_COLUMNS,
    STEP_RECORD_COLUMNS,
    attempt_record,
    is_graph_run,
    run_detail,
    step_record,
)
from ..models import StepAttempt, WorkflowRun, WorkflowStep

#: Rows serialized per query.
BATCH = 500


def run_history_json(run: WorkflowRun) -> Iterator[str]:
    """``{"run": <run detail>, "steps": [...], "attempts": [...]}`` in pieces.

    The run as ``get_run_status`` and ``GET runs/{id}/`` give it, every step as
    ``runs/{id}/steps/`` and every attempt as ``runs/{id}/history/`` (public errors: no
    traceback, as everywhere outside the console's pages).

    Args:
        run: The run.

    Yields:
        Pieces of the JSON text, in order.
    """
    graph = is_graph_run(run.workflow, run.graph_hash)
    yield '{"run": ' + _dumps(run_detail(run)) + ', "steps": ['
    steps = WorkflowStep.objects.filter(run=run).order_by("id").values(*STEP_RECORD_COLUMNS)
    yield from _items(steps, lambda rows: [step_record(row, graph=graph) for row in rows])
    yield '], "attempts": ['
    attempts = StepAttempt.objects.filter(step__run=run).order_by(
        "step_id", "attempt").values(*ATTEMPT_RECORD_COLUMNS)
    yield from _items(attempts, lambda rows: [attempt_record(row, graph=graph)
                                              for row in rows])
    yield "]}\n"


def _items(queryset: QuerySet[Any], serialize: Callable[[list[Any]], Any]) -> Iterator[str]:
    first = True
    batch: list[Any] = []
    for row in queryset.iterator(chunk_size=BATCH):
        batch.append(row)
        if len(batch) == BATCH:
            yield from _dump_batch(serialize(batch), first)
            first, batch = False, []
    if batch:
        yield from _dump_batch(serialize(batch), first)


def _dump_batch(items: Any, first: bool) -> Iterator[str]:
    text = ", ".join(_dumps(item) for item in items)
    yield text if first else ", " + text


def _dumps(value: object) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder)
