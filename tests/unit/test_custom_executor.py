"""The executor port: ``EXECUTOR`` as the dotted path of an ``Executor`` subclass.

A third executor (``tests.testapp.executors.Threads``: a thread pool, sleeps on its own
timers) runs the DSL and graph suites' workflows to the same end as inline runs; the
steps and sleeps it declines fall back as Pikku's do (in the pass, waited in place).
"""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.conf import pikku_settings
from pikku_workflows.engine.dispatch import executor_named, get_executor
from pikku_workflows.exceptions import WorkflowConfigurationError
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.testing import run_inline
from tests.services import wait_for
from tests.testapp.executors import Threads

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = "tests.testapp.executors.Threads"
WITHOUT_SLEEPS = "tests.testapp.executors.ThreadsWithoutSleeps"
ENDED = ("completed", "failed", "cancelled", "suspended")

#: The DSL and graph suites' workflows, with an input each.
SCENARIOS = [
    ("sequential", {"x": 1}),
    ("branching", {"amount": 150}),
    ("retrying", {"fail_times": 1, "retries": 2}),
    ("compensated", {"order": 1}),
    ("caught_failure", {}),
    ("fan_out", {"numbers": [1, 2, 3]}),
    ("parent", {"child": "child_ok"}),
    ("ten_steps", {}),
    ("naps", {"nap": "1s"}),
    ("user_onboarding", {"email": "w@example.com", "name": "W", "ok": True}),
    ("loops", {"times": 3}),
    ("queued_graph", {"values": [1, 2, 3, 4]}),
    ("diamond", {"n": 2, "m": 3}),
    ("squares", {"values": [1, 2, 3]}),
    ("squares_in_order", {"values": [3, 4]}),
    ("graph_on_error", {"order": 5}),
    ("graph_with_child", {"n": 4}),
]


def ended(run_id):
    return WorkflowRun.objects.filter(pk=run_id, status__in=ENDED).first()


def shape(run):
    """What a run did: its status, output, error code and each step's end."""
    steps = sorted(WorkflowStep.objects.filter(run=run).values_list(
        "step_name", "status", "attempt_count"))
    return run.status, run.output, (run.error or {}).get("code"), steps


@pytest.fixture
def threads(settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": THREADS, "DEFAULT_RETRY_DELAY": 0}
    executor = get_executor(False)
    assert isinstance(executor, Threads)
    executor.errors.clear()
    yield executor
    assert executor.errors == []


@pytest.mark.parametrize(("workflow", "data"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_custom_executor_runs_each_workflow_as_inline_runs_do(threads, workflow, data):
    with run_inline():  # queued steps in the pass too: nothing goes to the pool
        expected = shape(pw.start_workflow(workflow, data))
    jobs = len(threads.jobs)
    run = pw.start_workflow(workflow, data)
    assert not run.inline
    # Until the run looks as the inline one does (a run whose child suspends stays
    # running, as inline): the last shape seen is reported otherwise.
    seen: list[object] = []

    def settled() -> bool:
        seen[:] = [shape(WorkflowRun.objects.get(pk=run.pk))]
        return seen[0] == expected

    try:
        wait_for(settled, timeout=60)
    except AssertionError:
        assert seen[0] == expected
    assert len(threads.jobs) > jobs  # it went through the thread pool


def test_a_declined_step_runs_in_the_pass_and_a_taken_one_on_the_pool(threads):
    run = pw.start_workflow("declined_and_taken", {"n": 1})
    done = wait_for(lambda: ended(run.pk), timeout=60)
    assert done.status == "completed" and done.output == {"declined": 2, "taken": 2}
    step_jobs = [args[1] for name, args in threads.jobs if name == "run_queued_step"]
    assert "Taken" in step_jobs and "Declined" not in step_jobs
    # The declined step kept its rows, attempts and retries, run in the pass.
    declined = WorkflowStep.objects.get(run=run, step_name="Declined")
    assert declined.attempt_count == 2
    assert list(StepAttempt.objects.filter(step=declined).order_by("attempt")
                .values_list("status", flat=True)) == ["failed", "succeeded"]


def test_a_declined_wakeup_is_waited_in_place(settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": WITHOUT_SLEEPS, "DEFAULT_RETRY_DELAY": 0}
    executor = get_executor(False)
    run = pw.start_workflow("naps", {"nap": "1s"})
    done = wait_for(lambda: ended(run.pk), timeout=60)
    assert done.status == "completed" and executor.waited_in_place == 1
    assert not [args for name, args in executor.jobs if name == "drive_queued"][1:], \
        "the sleep needed no second pass job"
    assert executor.errors == []


def test_the_setting_names_an_executor_class(settings):
    for bad, says in [("tests.testapp.executors.Missing", "does not import"),
                      ("tests.testapp.executors.DECLINED_QUEUE", "not an executor class"),
                      ("thread-pool", "dotted path of an Executor subclass")]:
        settings.PIKKU_WORKFLOWS = {"EXECUTOR": bad}
        with pytest.raises(WorkflowConfigurationError, match=says):
            pikku_settings.EXECUTOR  # noqa: B018
    with pytest.raises(WorkflowConfigurationError, match="not an Executor subclass"):
        executor_named("tests.testapp.shared.Ledger")
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": THREADS}
    assert executor_named(THREADS) is get_executor(False)  # made once, then registered
