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


def test_one_helper_builds_the_ids_of_every_record():
    """Each record's ``extra`` comes from ``log_extra``: no module spells the keys itself
    (a record built by hand drifts: a missing ``str()``, a key renamed in one place)."""
    import uuid
    from pathlib import Path

    from pikku_workflows.log_ids import log_extra

    run_id = uuid.uuid4()
    assert log_extra(run_id) == {"pikku_run_id": str(run_id)}
    assert log_extra(run_id, workflow="wf", step="Charge", attempt=2) == {
        "pikku_run_id": str(run_id), "pikku_workflow": "wf", "pikku_step": "Charge",
        "pikku_attempt": 2}
    package = Path(pw.__file__).parent
    spelled = [str(path.relative_to(package)) for path in package.rglob("*.py")
               if '"pikku_run_id"' in path.read_text() and path.name != "log_ids.py"]
    assert spelled == []
