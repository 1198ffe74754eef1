"""The MIRROR: every committed row reaches it; a broken mirror changes nothing."""

from __future__ import annotations

import logging

import pytest

import pikku_workflows as pw
from pikku_workflows import mirror
from pikku_workflows.engine.versions import register_versions
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep, WorkflowVersion

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pikku_mirror"])


class BrokenMirror(mirror.Mirror):
    """A mirror that always fails (the run must not notice)."""

    calls = 0

    def write(self, kind, row):
        BrokenMirror.calls += 1
        raise ConnectionError("the mirror is down")


def test_database_mirror_copies_runs_steps_attempts_and_versions(settings, django_user_model):
    settings.PIKKU_WORKFLOWS = {"MIRROR": "pikku_workflows.mirror.DatabaseMirror",
                                "DEFAULT_RETRY_DELAY": 0}
    owner = django_user_model.objects.create_user("ada")
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2}, owner=owner)
    suspended = pw.start_workflow("two_gates", {})
    register_versions()
    assert mirror.flush()
    copy = WorkflowRun.objects.using("pikku_mirror").get(pk=run.pk)
    assert copy.status == "completed" and copy.output == {"ok": True, "attempt": 2}
    assert copy.owner_id is None  # the user lives in the primary database only
    step = WorkflowStep.objects.using("pikku_mirror").get(run_id=run.pk)
    assert step.attempt_count == 2 and step.status == "succeeded"
    attempts = StepAttempt.objects.using("pikku_mirror").filter(step__run_id=run.pk)
    assert sorted(attempts.values_list("status", flat=True)) == ["failed", "succeeded"]
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=suspended.pk).status == "suspended"
    assert WorkflowVersion.objects.using("pikku_mirror").count() == \
        WorkflowVersion.objects.count() > 0
    # Later writes follow: resuming updates the copy.
    pw.resume_run(suspended.pk, "a")
    pw.resume_run(suspended.pk, "b")
    assert mirror.flush()
    assert WorkflowRun.objects.using("pikku_mirror").get(pk=suspended.pk).output == {
        "warehouse": "a", "courier": "b"}


def test_a_broken_mirror_changes_nothing(settings, caplog):
    settings.PIKKU_WORKFLOWS = {"MIRROR": "tests.unit.test_mirror.BrokenMirror",
                                "DEFAULT_RETRY_DELAY": 0}
    BrokenMirror.calls = 0
    with caplog.at_level(logging.ERROR, logger="pikku_workflows.mirror"):
        run = pw.start_workflow("sequential", {"x": 1})
        assert mirror.flush()
    assert run.status == "completed" and run.output == {"total": 2, "doubled": 4}
    assert BrokenMirror.calls > 0
    assert "the mirror failed" in caplog.text
    assert WorkflowRun.objects.using("pikku_mirror").count() == 0


def test_no_mirror_configured_sends_nothing(settings):
    settings.PIKKU_WORKFLOWS = {"DEFAULT_RETRY_DELAY": 0}
    pw.start_workflow("sequential", {"x": 1})
    assert mirror.flush()
    assert WorkflowRun.objects.using("pikku_mirror").count() == 0
