"""Steps that fail in unusual ways, unusual step functions, and values at the edges of
what a declaration or a stored value accepts (issue 23, defects 2, 4, 5, 6, 9 and 10).

Before the fixes: an exception whose ``str()`` raised, or a ``SystemExit`` /
``KeyboardInterrupt`` / ``GeneratorExit`` from a step, left the step ``running``; an
``async def`` step stored a coroutine; huge durations raised ``OverflowError``; empty or
control-character names registered; ``{1: "a", "1": "b"}`` was stored as ``{"1": "b"}``.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.durations import parse_duration
from pikku_workflows.engine.serialization import NotSerializableError, encode, normalize
from pikku_workflows.exceptions import WorkflowDefinitionError, WorkflowInputError
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.runtime import step_worker
from pikku_workflows.runtime.orchestrator import drive_queued
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.testing import fake_clock
from tests.testapp.shared import CALLS

pytestmark = pytest.mark.django_db

QUEUED = {"EXECUTOR": "rq", "EAGER_QUEUED_STEPS": False}


def step_of(run: WorkflowRun, name: str) -> WorkflowStep:
    return WorkflowStep.objects.get(run=run, step_name=name)


def drive_on_workers(run: WorkflowRun) -> None:
    """Do in this process what step workers and orchestrators would (jobs sent on commit
    never leave the test's transaction)."""
    for _ in range(20):
        if not WorkflowRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists():
            return
        for step in WorkflowStep.objects.filter(
                run=run, rpc_name__isnull=False,
                status__in=(StepStatus.PENDING, StepStatus.SCHEDULED)):
            step_worker.run_queued_step(str(run.pk), step.step_name, step.rpc_name)
        drive_queued(run.pk)
    raise AssertionError("the run did not end")


def check_failed_and_compensated(run: WorkflowRun, message: str) -> None:
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED, run.error
    assert run.error["code"] == "STEP_FAILED"
    step = step_of(run, "Strange")
    assert step.status == StepStatus.FAILED and step.attempt_count == 2
    assert step.error["message"] == message
    assert [a.status for a in StepAttempt.objects.filter(step=step).order_by("attempt")] == \
        ["failed", "failed"]
    assert step_of(run, "Strange:onError").status == StepStatus.SUCCEEDED
    assert CALLS["undo_strange"][0]["data"]["error"]["message"] == message


# --- defect 2: an exception that cannot be printed ---------------------------------------


@pytest.mark.parametrize(("kind", "message"), [
    ("bad-str", "<unprintable BadError>"),
    ("bad-args", "<unprintable RuntimeError>"),
])
def test_an_unprintable_exception_fails_the_attempt_then_retries_and_compensates(kind, message):
    run = pw.start_workflow("strange_failure", {"kind": kind, "times": 9}, inline=True)
    check_failed_and_compensated(run, message)


def test_an_unprintable_exception_retries_then_succeeds():
    run = pw.start_workflow("strange_failure", {"kind": "bad-str", "times": 1}, inline=True)
    assert run.status == RunStatus.COMPLETED and run.output == {"attempt": 2}


@pytest.mark.parametrize("kind", ["bad-str", "bad-args"])
def test_an_unprintable_exception_on_a_step_worker(kind):
    with override_settings(PIKKU_WORKFLOWS=QUEUED), fake_clock():
        run = pw.start_workflow("strange_failure",
                                {"kind": kind, "times": 9, "queued": True}, inline=False)
        drive_on_workers(run)
    check_failed_and_compensated(
        run, "<unprintable BadError>" if kind == "bad-str" else "<unprintable RuntimeError>")


# --- defect 6: SystemExit, GeneratorExit, KeyboardInterrupt --------------------------------


@pytest.mark.parametrize(("kind", "message"), [
    ("system-exit", "3"), ("generator-exit", "GeneratorExit")])
def test_system_exit_and_generator_exit_fail_the_attempt_like_an_exception(kind, message):
    run = pw.start_workflow("strange_failure", {"kind": kind, "times": 9}, inline=True)
    check_failed_and_compensated(run, message)
    assert step_of(run, "Strange").error["type"] == \
        {"system-exit": "SystemExit", "generator-exit": "GeneratorExit"}[kind]


def test_system_exit_is_retried_like_an_exception():
    run = pw.start_workflow("strange_failure", {"kind": "system-exit", "times": 1}, inline=True)
    assert run.status == RunStatus.COMPLETED and run.output == {"attempt": 2}


@pytest.mark.parametrize("kind", ["system-exit", "generator-exit"])
def test_system_exit_on_a_step_worker_fails_the_attempt(kind):
    with override_settings(PIKKU_WORKFLOWS=QUEUED), fake_clock():
        run = pw.start_workflow("strange_failure",
                                {"kind": kind, "times": 9, "queued": True}, inline=False)
        drive_on_workers(run)
    check_failed_and_compensated(run, "3" if kind == "system-exit" else "GeneratorExit")


def test_keyboard_interrupt_records_the_failed_attempt_then_propagates():
    with pytest.raises(KeyboardInterrupt):
        pw.start_workflow("strange_failure", {"kind": "keyboard-interrupt", "times": 1},
                          inline=True)
    step = WorkflowStep.objects.get(step_name="Strange")
    assert step.status == StepStatus.FAILED and step.attempt_count == 1
    assert step.error == {"message": "KeyboardInterrupt", "type": "KeyboardInterrupt"}
    assert StepAttempt.objects.get(step=step).status == "failed"


def test_keyboard_interrupt_on_a_step_worker_records_the_attempt_then_propagates():
    with override_settings(PIKKU_WORKFLOWS=QUEUED), fake_clock():
        run = pw.start_workflow("strange_failure", {
            "kind": "keyboard-interrupt", "times": 1, "queued": True}, inline=False)
        drive_queued(run.pk)
        step = step_of(run, "Strange")
        with pytest.raises(KeyboardInterrupt):
            step_worker.run_queued_step(str(run.pk), "Strange", "queued_fails_strangely")
        step.refresh_from_db()
        assert step.attempt_count == 1 and step.error["type"] == "KeyboardInterrupt"
        assert step.status == StepStatus.SCHEDULED  # its retry is on its way
        drive_on_workers(run)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.output == {"attempt": 2}


# --- defect 5: async def ------------------------------------------------------------------


def test_async_step_functions_and_closures_run_to_completion():
    run = pw.start_workflow("uses_async_steps", {"value": 21}, inline=True)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.output == {"fn": {"value": 42, "attempt": 1}, "closure": "closure 21",
                          "flaky": 2}


def test_an_async_step_function_runs_on_a_step_worker():
    with override_settings(PIKKU_WORKFLOWS=QUEUED), fake_clock():
        run = pw.start_workflow("uses_queued_async_step", {"value": 4}, inline=False)
        drive_on_workers(run)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.output == {"value": 8}


def test_an_async_graph_node_runs_to_completion():
    run = pw.start_workflow("async_graph", {"value": 5}, inline=True)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.output == {"value": 10, "attempt": 1}


def test_an_async_step_function_is_still_directly_callable():
    from tests.unit.workflows_failures import async_double

    assert registry.function("async_double").fn is async_double


@pytest.mark.parametrize("decorate", [
    lambda fn: pw.workflow(fn), lambda fn: pw.workflow(name="async_named")(fn)])
def test_an_async_workflow_is_refused_at_declaration(decorate):
    async def async_body(wf, data):
        return None

    with registry.isolated(), pytest.raises(WorkflowDefinitionError, match="async def"):
        decorate(async_body)
    assert registry.find_workflow("async_body") is None


# --- defect 4: durations that overflow -----------------------------------------------------


HUGE = [10**400, "9" * 5000 + "s", "9" * 5000, 1e308, "9" * 400 + ".5"]


@pytest.mark.parametrize("value", HUGE, ids=["int", "digits-unit", "digits", "float", "frac"])
def test_parse_duration_refuses_huge_values_naming_the_value_and_the_maximum(value):
    with pytest.raises(ValueError, match="the longest duration is 100 years") as caught:
        parse_duration(value, what="timeout")
    message = str(caught.value)
    assert message.startswith("invalid timeout ") and len(message) < 200
    assert "(a number of 401 digits)" in message if value == 10**400 else \
        str(value)[:20] in message


@pytest.mark.parametrize("option", ["retry_delay", "timeout"])
def test_huge_step_options_are_refused_at_declaration(option):
    with registry.isolated(), pytest.raises(WorkflowDefinitionError, match="100 years"):
        pw.function(name="huge_options", **{option: 10**400})(lambda data: data)
    with registry.isolated(), pytest.raises(WorkflowDefinitionError, match="100 years"):
        pw.graph_workflow("huge_graph", nodes={"a": "echo"},
                          config={"a": {"retry_delay": "9" * 5000 + "s"}})


def test_a_huge_sleep_or_timeout_in_a_body_fails_the_run_clearly():
    with registry.isolated():
        @pw.workflow(name="huge_sleep")
        def huge_sleep(wf, data):
            wf.sleep("Nap", 10**400)

        @pw.workflow(name="huge_timeout")
        def huge_timeout(wf, data):
            wf.do("Echo", "echo", 1, timeout="9" * 5000 + "s")

        for name in ("huge_sleep", "huge_timeout"):
            run = pw.start_workflow(name, {}, inline=True)
            assert run.status == RunStatus.FAILED
            assert "100 years" in run.error["message"], run.error


def test_run_to_completion_refuses_a_huge_timeout():
    for timeout in (10**400, "9" * 5000 + "s"):
        with pytest.raises(WorkflowInputError, match="100 years"):
            pw.run_to_completion("sequential", {"x": 1}, timeout=timeout)
    assert not WorkflowRun.objects.exists()


# --- defect 9: names ----------------------------------------------------------------------


BAD_NAMES = ["", " ", "a\nb", "tab\there", "a/b", "nul\x00", "\x7f"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_workflow_and_function_names_are_refused(name):
    with registry.isolated():
        with pytest.raises(WorkflowDefinitionError):
            pw.workflow(name=name)(lambda wf, data: None)
        with pytest.raises(WorkflowDefinitionError):
            pw.function(name=name)(lambda data: None)
        with pytest.raises(WorkflowDefinitionError):
            pw.graph_workflow(name, nodes={"a": "echo"})
        assert registry.find_workflow("<lambda>") is None
        assert registry.function("<lambda>") is None


def test_a_name_with_a_slash_is_refused_naming_the_problem():
    with registry.isolated(), pytest.raises(WorkflowDefinitionError, match="'/'"):
        pw.workflow(name="orders/v2")(lambda wf, data: None)


# --- defect 10: JSON keys that collide -----------------------------------------------------


@pytest.mark.parametrize("value", [
    {1: "a", "1": "b"}, {"x": [{True: 1, "true": 2}]}, {None: 1, "null": 2},
    {1.5: 1, "1.5": 2}])
def test_colliding_keys_are_refused_naming_the_key(value):
    with pytest.raises(NotSerializableError, match="more than once"):
        encode(value, what="the input")
    with pytest.raises(WorkflowInputError, match="more than once"):
        pw.start_workflow("sequential", value)
    assert not WorkflowRun.objects.exists()


def test_non_colliding_non_string_keys_are_still_stored_as_text():
    assert normalize({1: "a", "2": "b", None: 0, 2.5: 1, False: 2}, what="x") == \
        {"1": "a", "2": "b", "null": 0, "2.5": 1, "false": 2}


def test_a_colliding_step_result_fails_the_step_without_retries():
    with registry.isolated():
        @pw.function(name="collides")
        def collides(data):
            CALLS["collides"].append(data)
            return {1: "a", "1": "b"}

        @pw.workflow(name="collides_wf")
        def collides_wf(wf, data):
            return wf.do("Collide", "collides", {}, retries=3, retry_delay=0)

        run = pw.start_workflow("collides_wf", {}, inline=True)
    assert run.status == RunStatus.FAILED
    assert len(CALLS["collides"]) == 1
    assert "'1'" in run.error["message"] and "more than once" in run.error["message"]
