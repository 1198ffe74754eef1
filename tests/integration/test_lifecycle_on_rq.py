"""Child runs on the rq executor (jobs drained in this process): nesting is bounded and
a parent never ends while a child lives. The inline cases are in
tests/unit/test_lifecycle.py; under SIGKILL, tests/faults/test_worker_kills.py."""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.testing import drain_queues
from tests.unit.test_lifecycle import assert_no_orphans

pytestmark = pytest.mark.django_db(transaction=True)

RQ = {"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0, "EAGER_QUEUED_STEPS": False}


def test_a_self_recursive_workflow_stops_at_max_child_depth(rq_executor):
    with override_settings(PIKKU_WORKFLOWS={**RQ, "MAX_CHILD_DEPTH": 4}):
        run = pw.start_workflow("nests_itself", {"n": 1000})
        drain_queues(rounds=200)
    assert WorkflowRun.objects.get(pk=run.pk).status == "failed"
    assert WorkflowRun.objects.count() == 5  # the run and four levels of children
    assert set(WorkflowRun.objects.values_list("status", flat=True)) == {"failed"}
    assert WorkflowStep.objects.filter(error__code="CHILD_DEPTH_EXCEEDED").count() == 1
    assert_no_orphans()


@pytest.mark.parametrize("workflow, status", [("parent_child_and_failure", "failed"),
                                              ("parent_catches_child_sibling", "completed")])
def test_a_parent_ends_with_its_child_cancelled(rq_executor, workflow, status):
    run = pw.start_workflow(workflow, {})
    drain_queues()
    assert WorkflowRun.objects.get(pk=run.pk).status == status
    assert WorkflowRun.objects.get(parent_run=run).status == "cancelled"
    assert_no_orphans()
