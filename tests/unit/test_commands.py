"""``pikku_start --wait`` (progress, output, exit codes) and ``pikku_prune`` (batches,
progress, dry run)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.testing import fake_clock


class Terminal(StringIO):
    """Captured output that says it is a terminal, so that the command draws its bar."""

    def isatty(self) -> bool:
        return True


def start(*args: str, stdout: StringIO | None = None) -> list[str]:
    out = stdout if stdout is not None else StringIO()
    call_command("pikku_start", *args, stdout=out)
    return out.getvalue().splitlines()


# --- pikku_start --wait ---------------------------------------------------------------


@pytest.mark.django_db
def test_start_wait_prints_the_summary_and_the_output():
    lines = start("sequential", '{"x": 1}', "--wait", "--inline")
    run = WorkflowRun.objects.get()
    assert lines[0].startswith(f"run {run.pk} of sequential completed in ")
    assert lines[0].endswith("s (2 steps succeeded)")
    assert json.loads("\n".join(lines[1:])) == {"total": 2, "doubled": 4}
    # Not a terminal: no bar, nothing but the final lines.
    assert len(lines) == 1 + len(json.dumps(run.output, indent=2).splitlines())


@pytest.mark.django_db
def test_start_without_wait_prints_only_the_id():
    lines = start("sequential", '{"x": 1}')
    assert lines == [str(WorkflowRun.objects.get().pk)]


@pytest.mark.django_db
@pytest.mark.parametrize(("workflow", "data", "status", "code", "error"), [
    ("compensated", {"order": 7, "retries": 1}, "failed", 1,
     "error: step 'Charge' failed: card declined for 7 [STEP_FAILED]"),
    ("cancels_itself", {"cancel": True}, "cancelled", 2,
     "error: customer changed their mind [WORKFLOW_CANCELLED]"),
    ("two_gates", {}, "suspended", 3, "error: Awaiting warehouse [WORKFLOW_SUSPENDED]"),
    ("needs_approval", {}, "suspended", 3,
     "error: Manager sign-off [WAITING_FOR_APPROVAL]"),
])
def test_start_wait_exits_non_zero_unless_completed(workflow, data, status, code, error):
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        start(workflow, json.dumps(data), "--wait", "--inline", stdout=out)
    run = WorkflowRun.objects.get(workflow=workflow)
    assert run.status == status
    assert raised.value.returncode == code
    assert str(raised.value).startswith(f"run {run.pk} {status}: ")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"run {run.pk} of {workflow} {status} in ")
    assert lines[-1] == error
    assert "__workflow" not in out.getvalue()  # a gate by its public name


@pytest.mark.django_db(transaction=True)  # the bar follows the run's step signals
def test_start_wait_draws_a_bar_with_the_step_names_on_a_terminal():
    out = Terminal()
    start("retrying", '{"fail_times": 1, "retries": 2}', "--wait", "--inline", stdout=out)
    text = out.getvalue()
    assert "Flaky (attempt 2)" in text  # the retry, named while it was under way
    assert "retrying" in text and "1/1" in text  # the workflow, done/planned steps
    assert "[####################] 1/1" in text
    # The bar is gone (erased); the final lines follow it.
    lines = text.splitlines()
    assert lines[-5].endswith("s (1 step succeeded)")
    assert "\x1b[2K\x1b[Grun " in lines[-5]  # written over the erased bar
    assert "\r" not in text  # redrawn with escape codes: captured lines stay lines
    assert json.loads("".join(lines[-4:])) == {"ok": True, "attempt": 2}


@pytest.mark.django_db(transaction=True)
def test_start_wait_names_the_step_an_inline_run_waits_for():
    """While an inline run sleeps, the bar names the sleep, not the step before it."""
    out = Terminal()
    shown_while_waiting: list[str] = []
    with fake_clock() as clock:
        sleep = clock.sleep

        def record_then_sleep(seconds: float) -> None:
            shown_while_waiting.append(out.getvalue().rsplit("\x1b[2K", 1)[-1])
            sleep(seconds)

        clock.sleep = record_then_sleep  # type: ignore[method-assign]
        start("sleeps_a_week", "{}", "--wait", "--inline", stdout=out)
    assert shown_while_waiting and all("A week" in bar for bar in shown_while_waiting), (
        shown_while_waiting)
    assert WorkflowRun.objects.get().status == "completed"


@pytest.mark.django_db
def test_start_wait_refuses_bad_input_and_unknown_workflows():
    with pytest.raises(CommandError, match="not valid JSON"):
        start("sequential", "{oops", "--wait")
    with pytest.raises(CommandError, match="no workflow"):
        start("missing", "{}", "--wait")
    assert not WorkflowRun.objects.exists()


# --- pikku_prune ------------------------------------------------------------------------


def _finished(workflow: str, days_ago: float, status: str = "completed") -> WorkflowRun:
    run = pw.start_workflow(workflow, {"x": 1} if workflow == "sequential" else {},
                            inline=True)
    WorkflowRun.objects.filter(pk=run.pk).update(
        status=status, finished_at=timezone.now() - timedelta(days=days_ago))
    return run


def prune(*args: str) -> list[str]:
    out = StringIO()
    call_command("pikku_prune", *args, stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.django_db
def test_prune_deletes_in_batches_and_reports_each_batch():
    old = [_finished("sequential", 40 + i) for i in range(5)]
    recent = _finished("sequential", 10)
    live = pw.start_workflow("two_gates", {}, inline=True)  # suspended: never pruned
    lines = prune("--older-than", "30d", "--batch-size", "2")
    assert lines[0] == "5 run(s) finished before " + lines[0].split(" before ")[1]
    assert lines[1:4] == ["deleted 2/5", "deleted 4/5", "deleted 5/5"]
    assert lines[4].startswith("deleted 5 run(s) finished before ")
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {recent.pk, live.pk}
    # Their steps and attempts went with them.
    assert not WorkflowStep.objects.filter(run_id__in=[r.pk for r in old]).exists()
    assert not StepAttempt.objects.filter(step__run_id__in=[r.pk for r in old]).exists()
    assert WorkflowStep.objects.filter(run_id=recent.pk).count() == 2


@pytest.mark.django_db
def test_prune_dry_run_counts_and_deletes_nothing():
    for days in (40, 50, 60):
        _finished("sequential", days, status="failed")
    _finished("sequential", 45, status="cancelled")
    _finished("sequential", 5)
    lines = prune("--older-than", "30d", "--dry-run", "--status", "failed")
    assert lines == ["3 run(s) would be deleted (dry run: nothing deleted)"]
    assert WorkflowRun.objects.count() == 5
    assert prune("--older-than", "30d", "--dry-run")[0].startswith("4 run(s) would be deleted")
    assert prune("--older-than", "55d", "--dry-run")[0].startswith("1 run(s) would be deleted")


@pytest.mark.django_db
def test_prune_with_nothing_to_delete():
    _finished("sequential", 1)
    assert prune("--older-than", "30d") == [
        "nothing to delete: no finished run is older than 30d"]
    assert prune("--older-than", "0s", "--status", "failed", "cancelled") == [
        "nothing to delete: no failed or cancelled run is older than 0s"]
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
def test_prune_skips_a_parent_whose_child_still_runs_and_counts_it_out():
    parent = pw.start_workflow("parent", {"child": "child_suspends", "child_input": {}})
    child = WorkflowRun.objects.get(parent_run=parent)
    WorkflowRun.objects.filter(pk=parent.pk).update(
        status="failed", finished_at=timezone.now() - timedelta(days=40))
    done = _finished("sequential", 40)
    assert prune("--older-than", "30d", "--dry-run")[0].startswith("1 run(s) would be")
    prune("--older-than", "30d")
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {parent.pk, child.pk}
    assert not WorkflowRun.objects.filter(pk=done.pk).exists()
