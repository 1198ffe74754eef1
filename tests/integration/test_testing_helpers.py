"""``pikku_workflows.testing.drain_queues``: users' tests of the rq executor, no worker."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain_queues
from tests.testapp.models import Ledger

pytestmark = pytest.mark.django_db(transaction=True)


def test_drain_queues_runs_passes_and_queued_steps_in_process(rq_settings):
    runs = [pw.start_workflow("ten_steps", {}) for _ in range(2)]
    assert {r.status for r in WorkflowRun.objects.all()} == {"running"}
    assert drain_queues() >= 2  # two first passes, then what they led to
    for run in runs:
        run.refresh_from_db()
        assert run.status == "completed" and run.output == 45
    assert Ledger.objects.count() == 10  # five queued steps per run, each once
    assert drain_queues() == 0  # nothing left


def test_drain_queues_leaves_a_sleep_that_is_not_due(rq_settings):
    run = pw.start_workflow("naps", {"nap": "1h"})
    drain_queues()
    run.refresh_from_db()
    assert run.status == "running"
    assert run.steps.get(step_name="Nap").wake_at is not None
    assert not run.steps.filter(step_name="After").exists()
