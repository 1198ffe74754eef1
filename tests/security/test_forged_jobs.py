"""Forged and stale queue messages: a job naming anything but pikku's job functions is
refused; a pikku job with a forged or stale payload runs nothing and changes nothing.

A job's arguments are ids and names only (executors/jobs.py): ``orchestrate(run_id)``,
``run_queued_step(run_id, step_name, rpc_name)``, ``run_queued_steps(run_id, rpc_names)``,
``wake_due(queue)``. Here the job functions are called in-process (both databases);
tests/integration/test_forged_jobs_on_workers.py enqueues the messages on Redis and lets
a real ``pikku_worker --burst`` take them. What a job might run leaves a mark
no mock could fake: a row in ``Ledger`` (``q_record``), a call in ``CALLS``, a file.

Already covered in tests/integration/test_rq_executor.py (not repeated): a step job
naming another function than its step's, a foreign function on the step queue, drain
jobs naming other functions, a duplicated step job.
"""

from __future__ import annotations

import uuid

import pytest
from django.test import override_settings
from redis import Redis
from rq.serializers import JSONSerializer

import pikku_workflows as pw
from pikku_workflows.executors import jobs
from pikku_workflows.executors.rq import (
    DRAIN_STEPS,
    JOB_FUNCTIONS,
    ORCHESTRATE,
    RUN_PASSES,
    RUN_STEP,
    WAKE_DUE,
)
from pikku_workflows.executors.worker import PikkuJob, RefusedJobError
from pikku_workflows.models import WorkflowRun, WorkflowStep
from tests.testapp.models import Ledger
from tests.testapp.shared import CALLS

RQ = {"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0}
UNKNOWN = str(uuid.UUID(int=0))

FOREIGN_FUNCTIONS = [
    "tests.security.targets.leave_mark", "os.system", "builtins.exec", "subprocess.call",
    "pikku_workflows.operations.cancel_run", "pikku_workflows.executors.rq.wake_due",
    "pikku_workflows.runtime.step_worker.run_queued_step",
    "pikku_workflows.executors.jobs", "pikku_workflows.executors.jobs.orchestrate.__call__",
    "pikku_workflows.executors.jobs.logger.error",
]


def first_pass_here(run: WorkflowRun) -> WorkflowRun:
    """The run's first pass in this process (its jobs, sent on commit, never leave)."""
    jobs.orchestrate(str(run.pk))
    run.refresh_from_db()
    return run


@pytest.fixture(autouse=True)
def keep_the_tests_connection(request, monkeypatch):
    """A job gives its database connection back when it ends; inside a test's
    transaction (the in-process tests) that would close the test's own connection."""
    if "transactional_db" not in request.fixturenames:
        monkeypatch.setattr(jobs, "close_old_connections", lambda: None)


@pytest.fixture
def rq_runs(db):
    """Runs on the RQ executor, each in a state a forged job might target."""
    with override_settings(PIKKU_WORKFLOWS=RQ):
        made = {
            "queued": first_pass_here(pw.start_workflow("one_queued", "q", inline=False)),
            "sleeping": first_pass_here(pw.start_workflow("sleeps_a_week", {}, inline=False)),
            "parent": first_pass_here(pw.start_workflow(
                "parent", {"child": "child_suspends"}, inline=False)),
            "suspended": first_pass_here(pw.start_workflow("two_gates", {}, inline=False)),
            "missing_fn": first_pass_here(pw.start_workflow(
                "calls_missing_function", {}, inline=False)),
            "cancelled": first_pass_here(pw.start_workflow("one_queued", "c", inline=False)),
        }
        made["cancelled"] = pw.cancel_run(made["cancelled"].pk)
        made["done"] = pw.start_workflow("sequential", {"x": 1}, inline=True)
    assert made["queued"].status == "running"
    assert WorkflowStep.objects.get(run=made["queued"], step_name="Only").status == "scheduled"
    assert made["sleeping"].status == "running"
    assert WorkflowStep.objects.get(run=made["sleeping"], step_name="A week").rpc_name is None
    assert made["suspended"].status == "suspended"
    assert made["missing_fn"].status == "suspended"
    assert made["done"].status == "completed" and made["cancelled"].status == "cancelled"
    CALLS.clear()
    yield made
    assert Ledger.objects.count() == 0  # q_record never ran


# --- the job function itself -----------------------------------------------------------------


@pytest.mark.parametrize("func", FOREIGN_FUNCTIONS)
def test_a_job_naming_anything_but_a_pikku_job_function_is_refused(func, tmp_path):
    mark = tmp_path / "mark"
    job = PikkuJob.create(func, args=[str(mark)], connection=Redis(),
                          serializer=JSONSerializer)
    with pytest.raises(RefusedJobError, match="refused"):
        job.perform()
    assert not mark.exists()


def test_pikku_job_functions_are_exactly_the_five_entry_points():
    assert {ORCHESTRATE, RUN_STEP, DRAIN_STEPS, WAKE_DUE, RUN_PASSES} == JOB_FUNCTIONS
    for name in JOB_FUNCTIONS:
        module, _, attribute = name.rpartition(".")
        assert module == "pikku_workflows.executors.jobs" and hasattr(jobs, attribute)


# --- forged or stale payloads, in-process -------------------------------------------------------


@pytest.mark.django_db
def test_orchestrator_jobs_for_missing_or_finished_runs_change_nothing(rq_runs, unchanged):
    """An unknown or malformed id used to raise WorkflowRunNotFoundError out of the job."""
    check = unchanged()
    with override_settings(PIKKU_WORKFLOWS=RQ):
        for run_id in (UNKNOWN, "not-a-uuid", "", "' OR 1=1 --"):
            assert jobs.orchestrate(run_id) == "missing"
        for key in ("done", "cancelled", "suspended", "missing_fn"):
            run = rq_runs[key]
            assert jobs.orchestrate(str(run.pk)) == run.status
    check()
    assert not CALLS


def step_jobs(runs):
    """(run id, step name, function) payloads that must run nothing."""
    q, s, p = (str(runs[k].pk) for k in ("queued", "sleeping", "parent"))
    return [
        pytest.param((UNKNOWN, "Only", "q_record"), "missing", id="unknown run"),
        pytest.param(("not-a-uuid", "Only", "q_record"), "missing", id="malformed run id"),
        pytest.param((q, "Nope", "q_record"), "missing", id="unknown step"),
        pytest.param((s, "Only", "q_record"), "missing", id="a step of another run"),
        pytest.param((q, "Only", "q_slow_charge"), "mismatch", id="tampered function"),
        pytest.param((q, "Only", "echo"), "mismatch", id="in-pass function"),
        pytest.param((q, "Only", "tests.security.targets.leave_mark"), "mismatch",
                     id="a dotted path"),
        pytest.param((q, "Only", None), "not-a-function-step", id="no function"),
        pytest.param((q, ["Only"], "q_record"), "not-a-function-step", id="a list as name"),
        pytest.param((s, "A week", None), "not-a-function-step", id="a sleep step"),
        pytest.param((s, "A week", ""), "not-a-function-step", id="a sleep step, empty name"),
        pytest.param((s, "Before", "echo"), "not-queued", id="a finished in-pass step"),
        pytest.param((p, "Run child", "child_suspends"), "not-a-function-step",
                     id="a child-run step"),
        pytest.param((str(runs["cancelled"].pk), "Only", "q_record"), "run-cancelled",
                     id="a cancelled run"),
        pytest.param((str(runs["done"].pk), "Add", "add"), "run-completed",
                     id="a completed run"),
        pytest.param((str(runs["suspended"].pk), "__workflow_suspend:Awaiting warehouse", None),
                     "not-a-function-step", id="a suspend gate"),
        pytest.param((str(runs["missing_fn"].pk), "Later", "deployed_later"), "run-suspended",
                     id="a suspended run's missing function"),
    ]


@pytest.mark.django_db
def test_step_jobs_with_forged_or_stale_payloads_run_nothing(rq_runs, unchanged):
    """A sleep step has no function: a job naming none for it used to pass the function
    check (None == None), find no such function and suspend the run as RPC_NOT_FOUND."""
    check = unchanged()
    with override_settings(PIKKU_WORKFLOWS=RQ):
        for param in step_jobs(rq_runs):
            args, expected = param.values
            assert jobs.run_queued_step(*args) == expected, param.id
    check()
    assert not CALLS


@pytest.mark.django_db
@pytest.mark.parametrize("rpc_names", [
    "q_record", None, 42, {"q_record": 1}, [["q_record"]], [None], ["q_slow_charge"],
    ["echo"], ["child_suspends"], ["tests.security.targets.leave_mark"], [],
])
def test_drain_jobs_with_forged_payloads_run_nothing(rq_runs, unchanged, rpc_names):
    """A string ran through its characters, a nested list raised TypeError."""
    check = unchanged()
    with override_settings(PIKKU_WORKFLOWS=RQ):
        for run_id in (str(rq_runs["queued"].pk), UNKNOWN, "not-a-uuid"):
            assert jobs.run_queued_steps(run_id, rpc_names) == "empty"
    check()


@pytest.mark.django_db
def test_a_drain_job_for_another_run_runs_nothing(rq_runs, unchanged):
    check = unchanged()
    with override_settings(PIKKU_WORKFLOWS=RQ):
        for key in ("sleeping", "cancelled", "done", "suspended"):
            assert jobs.run_queued_steps(str(rq_runs[key].pk), ["q_record"]) == "empty"
    check()


@pytest.mark.django_db
@pytest.mark.parametrize("queue", ["no-such-queue", "", "pikku-workflow-step-worker", None])
def test_wake_up_jobs_for_other_queues_wake_nothing(rq_runs, unchanged, queue):
    check = unchanged()
    with override_settings(PIKKU_WORKFLOWS=RQ):
        assert jobs.wake_due(queue) == "0 woken"
    check()
