"""The engine's log records carry the run's and the step's ids as ``extra``
(docs/observing.md#logs)."""

from __future__ import annotations

import logging

import pytest

import pikku_workflows as pw

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_and_step_records_carry_their_ids(caplog, settings):
    settings.PIKKU_WORKFLOWS = {"DEFAULT_RETRY_DELAY": 0}
    with caplog.at_level(logging.INFO, logger="pikku_workflows"):
        run = pw.start_workflow("traced_broken", {}, inline=True)
    assert run.status == "failed"
    attempts = [r for r in caplog.records if r.name == "pikku_workflows.steps"]
    assert [(r.pikku_run_id, r.pikku_workflow, r.pikku_step, r.pikku_attempt)
            for r in attempts] == [(str(run.pk), "traced_broken", "Broken", 1),
                                   (str(run.pk), "traced_broken", "Broken", 2)]
    (ended,) = [r for r in caplog.records if r.name == "pikku_workflows.orchestrator"]
    assert ended.getMessage() == f"run {run.pk} of traced_broken is failed"
    assert (ended.pikku_run_id, ended.pikku_workflow) == (str(run.pk), "traced_broken")
