"""Prometheus metrics of queued steps on the rq executor (jobs drained in this process).
The other metrics are in tests/unit/test_metrics.py."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.testing import drain_queues
from tests.unit import test_metrics
from tests.unit.test_metrics import Delta

metrics_on = test_metrics.metrics_on  # the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_queue_wait_of_queued_steps_on_workers(metrics_on, rq_executor):
    delta = Delta(("pikku_workflow_step_queue_wait_seconds_count", {"function": "q_record"}),
                  ("pikku_workflow_step_queue_wait_seconds_count", {"function": "echo"}))
    run = pw.start_workflow("ten_steps", {})
    drain_queues()
    run.refresh_from_db()
    assert run.status == "completed"
    assert delta() == [5, 0]  # sent through Redis: five; the in-pass echo steps: none
