"""The engine's run detail, steps and attempts (plain dicts built without DRF,
``engine/summary.py``) are exactly what the API's serializers, which describe them in the
OpenAPI schema, render: the same keys in the same order, the same values."""

from __future__ import annotations

import json

import pytest

import pikku_workflows as pw
from pikku_workflows.admin.history import run_history_json
from pikku_workflows.api.serializers import (
    AttemptSerializer,
    RunDetailSerializer,
    StepSerializer,
    StepSummarySerializer,
)
from pikku_workflows.engine.summary import (
    ATTEMPT_RECORD_COLUMNS,
    STEP_RECORD_COLUMNS,
    attempt_record,
    is_graph_run,
    step_record,
)
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.testing import fake_clock

pytestmark = pytest.mark.django_db

STARTS = [
    ("retrying", {"fail_times": 1, "retries": 2}),  # a retried step
    ("retrying", {"fail_times": 5, "retries": 0}),  # failed: a public error
    ("needs_approval", {}),  # an approval gate
    ("two_gates", {}),  # suspended
    ("compensated", {"order": 3, "retries": 0}),  # a compensation step
    ("closures", {}),
    ("sleeps_a_week", {}),  # a sleep
    ("parent", {"child": "child_ok"}),  # a child run
    ("user_onboarding", {"email": "a@example.com", "name": "A", "ok": True}),  # a graph
    ("loops", {"times": 3}),
]


@pytest.fixture
def runs() -> list[WorkflowRun]:
    with fake_clock():
        for name, data in STARTS:
            pw.start_workflow(name, data, inline=True)
    return list(WorkflowRun.objects.order_by("created_at", "id"))


def plain(value: object) -> object:
    """DRF's ReturnDict and OrderedDicts as plain dicts and lists, key order kept."""
    return json.loads(json.dumps(value))


def test_the_run_detail_is_what_its_serializer_renders(runs):
    assert len(runs) > len(STARTS)  # the child run too
    for run in runs:
        detail = pw.get_run_status(run.pk)
        rendered = plain(RunDetailSerializer(run).data)
        assert detail == rendered
        assert list(detail) == list(rendered) == list(RunDetailSerializer().fields)
        summary_fields = list(StepSummarySerializer().fields)
        assert detail["steps"] and all(list(step) == summary_fields
                                       for step in detail["steps"])
        # Plain dicts and lists all the way down: json.dumps and == need nothing else.
        assert type(detail) is dict and all(type(step) is dict for step in detail["steps"])
        assert json.loads(json.dumps(detail)) == detail


def test_steps_and_attempts_are_what_their_serializers_render(runs):
    kinds = set()
    for run in runs:
        context = {"graph": is_graph_run(run.workflow, run.graph_hash)}
        steps = WorkflowStep.objects.filter(run=run).order_by("id")
        records = [step_record(row, **context) for row in steps.values(*STEP_RECORD_COLUMNS)]
        assert records == plain(StepSerializer(steps, many=True, context=context).data)
        kinds.update(record["kind"] for record in records)
        attempts = StepAttempt.objects.filter(step__run=run).order_by("step_id", "attempt")
        records = [attempt_record(row, **context)
                   for row in attempts.values(*ATTEMPT_RECORD_COLUMNS)]
        rendered = plain(AttemptSerializer(attempts.select_related("step"), many=True,
                                           context=context).data)
        assert records == rendered
        assert all(list(record) == list(AttemptSerializer().fields) for record in records)
    assert kinds >= {"step", "closure", "child", "approval", "suspend", "sleep",
                     "compensation"}


def test_a_downloaded_history_holds_the_engines_dicts(runs):
    run = next(run for run in runs if run.workflow == "compensated")
    history = json.loads("".join(run_history_json(run)))
    assert history["run"] == pw.get_run_status(run.pk)
    steps = WorkflowStep.objects.filter(run=run).order_by("id")
    attempts = StepAttempt.objects.filter(step__run=run).order_by("step_id", "attempt")
    assert history["steps"] == plain(StepSerializer(steps, many=True).data)
    assert history["attempts"] == plain(
        AttemptSerializer(attempts.select_related("step"), many=True).data)
