"""Bad input to the Python API (``pikku_workflows.start_workflow``, ``resume_run``,
``cancel_run``, ``approve_step``, ``retry_run``, ``get_run_status``, ``run_to_completion``).

Each raises a ``WorkflowError`` naming the problem (``WorkflowInputError`` is also a
``ValueError``) before anything is written: the database is compared row by row.

Already covered elsewhere (not repeated): step names that are empty, reserved, too long,
not text or hold a line break (tests/unit/test_primitives.py); an input serializer's field
errors and the 1 MiB input limit on ``start/`` (tests/unit/api/test_routes.py).
"""

from __future__ import annotations

import math
import uuid

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.serialization import MAX_JSON_DEPTH
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from tests.testapp.shared import CALLS

from .conftest import nested

pytestmark = pytest.mark.django_db

UNKNOWN_ID = "00000000-0000-0000-0000-000000000000"


def deep(levels: int) -> list:
    return nested(levels)


UNSTORABLE_VALUES = [
    pytest.param("a\x00b", id="NUL"),
    pytest.param({"k": ["ok", "\x00"]}, id="nested NUL"),
    pytest.param({"a\x00": 1}, id="NUL in a key"),
    pytest.param("\ud800", id="lone surrogate"),
    pytest.param({"k": "\udfff"}, id="lone low surrogate"),
    pytest.param(deep(10_000), id="10,000 levels"),
    pytest.param(deep(MAX_JSON_DEPTH + 1), id="one level too deep"),
    pytest.param({1, 2}, id="a set"),
    pytest.param(object(), id="an object"),
    pytest.param(math.nan, id="NaN"),
    pytest.param({"x": math.inf}, id="infinity"),
    pytest.param(b"bytes", id="bytes"),
]


@pytest.fixture
def gated():
    """A run suspended at its first suspend gate, and one waiting at an approval gate."""
    made = {"suspended": pw.start_workflow("two_gates", {}),
            "approval": pw.start_workflow("needs_approval", {})}
    CALLS.clear()
    return made


# --- start_workflow and run_to_completion ---------------------------------------------------


@pytest.mark.parametrize("name", [
    "nope", "", None, 42, ["sequential"], {"name": "sequential"}, b"sequential",
    "os.system", "builtins.eval", "pikku_workflows.executors.jobs.orchestrate",
    "tests.security.targets.leave_mark", "add", "echo", "x" * 10_000, "sequential\x00",
])
def test_only_registered_workflows_start(unchanged, name):
    """A name is looked up in the registry, never imported: a dotted path, a step
    function's name or a value of another type finds nothing (lists and dicts used to
    raise TypeError)."""
    check = unchanged()
    for start in (pw.start_workflow, pw.run_to_completion):
        with pytest.raises(pw.WorkflowNotFoundError) as raised:
            start(name, {})
        assert len(str(raised.value)) < 400
    check()
    assert not CALLS


@pytest.mark.parametrize("value", UNSTORABLE_VALUES)
def test_unstorable_inputs_are_refused_before_a_run_exists(unchanged, value):
    check = unchanged()
    for start in (pw.start_workflow, pw.run_to_completion):
        with pytest.raises(pw.WorkflowInputError,
                           match="the input of workflow 'sequential'") as raised:
            start("sequential", value)
        assert isinstance(raised.value, ValueError)
    check()
    assert not CALLS


def test_an_input_at_the_depth_limit_runs():
    value = deep(MAX_JSON_DEPTH - 1)  # inside {"value": ...}
    run = pw.start_workflow("returns_given", {"value": value})
    assert run.status == "completed" and run.output == value
    assert pw.get_run_status(run.pk)["output"] == value


@pytest.mark.parametrize("key", [
    "", "   ", 5, ["k"], "k" * 201, "a\x00b", "line\nbreak", "\x1b[2J", "\ud800",
])
def test_bad_idempotency_keys_are_refused(unchanged, key):
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="idempotency_key"):
        pw.start_workflow("sequential", {"x": 1}, idempotency_key=key)
    check()


def test_start_node_of_a_dsl_workflow_is_refused(unchanged):
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="not a graph workflow"):
        pw.start_workflow("sequential", {"x": 1}, start_node="os.system")
    check()


@pytest.mark.parametrize("timeout", ["soon", "5 parsecs", -1, math.nan, math.inf, True,
                                     [1], "100000w"])
def test_a_timeout_that_does_not_parse_is_refused_before_the_run_exists(unchanged, timeout):
    """It used to be read after the run was created: a TypeError left a run behind."""
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="timeout"):
        pw.run_to_completion("sequential", {"x": 1}, timeout=timeout)
    check()
    assert not CALLS


# --- run ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [
    None, 5, "x", "", UNKNOWN_ID, {"id": 1}, ["a"], "' OR 1=1 --", uuid.UUID(UNKNOWN_ID),
])
def test_unknown_and_malformed_run_ids_are_not_found(gated, unchanged, run_id):
    check = unchanged()
    calls = [
        lambda: pw.get_run_status(run_id), lambda: pw.resume_run(run_id, 1),
        lambda: pw.cancel_run(run_id, "x"), lambda: pw.retry_run(run_id),
        lambda: pw.approve_step(run_id, "Manager sign-off", {"ok": True}),
    ]
    for call in calls:
        with pytest.raises(pw.WorkflowRunNotFoundError):
            call()
    check()


# --- resume_run -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", UNSTORABLE_VALUES)
def test_unstorable_resume_data_is_refused_and_the_gate_stays_closed(gated, unchanged, value):
    run = gated["suspended"]
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="the resume data"):
        pw.resume_run(run.pk, value)
    check()
    assert not CALLS


def test_resume_data_over_max_input_bytes_is_refused(gated, unchanged, settings):
    """The REST API refuses such a body (413); the Python API used to store it."""
    settings.PIKKU_WORKFLOWS = {"MAX_INPUT_BYTES": 1000}
    run = gated["suspended"]
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="MAX_INPUT_BYTES"):
        pw.resume_run(run.pk, "x" * 2000)
    check()


# --- cancel_run -----------------------------------------------------------------------------


@pytest.mark.parametrize("reason", [
    "", "   ", "x" * 1001, 123, ["a"], {"a": 1}, True, "a\x00b", "\x1b[2J", "bell\x07",
    "\ud800",
])
def test_bad_cancel_reasons_are_refused_and_the_run_stays(gated, unchanged, reason):
    """A reason is stored in the run's error: it used to be stored as given (a dict as
    the message; on PostgreSQL a NUL was a DataError)."""
    run = gated["suspended"]
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="cancel reason"):
        pw.cancel_run(run.pk, reason)
    check()
    assert WorkflowRun.objects.get(pk=run.pk).status == "suspended"


def test_a_cancel_reason_may_span_lines():
    run = pw.start_workflow("two_gates", {})
    run = pw.cancel_run(run.pk, "no courier\n\tsorry\r\n")
    assert run.status == "cancelled" and run.error["message"] == "no courier\n\tsorry\r\n"


# --- approve_step ----------------------------------------------------------------------------


@pytest.mark.parametrize("reason", [
    "", "   ", 5, None, ["Manager sign-off"], "x" * 281, "Manager\x00sign-off", "\x1b[2J",
    "Manager sign-off#1", "Manager sign-off:onError", "__workflow_approval:Manager sign-off",
    "\ud800",
])
def test_bad_approval_reasons_are_refused_and_nothing_is_recorded(gated, unchanged, reason):
    """A reason names a gate, so a gate's own rules apply. An int used to raise
    TypeError; "Manager sign-off#1" used to answer the *second* gate of that reason, and
    a 100,000-character reason was kept in the run's state."""
    run = gated["approval"]
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="approval reason"):
        pw.approve_step(run.pk, reason, {"ok": True})
    check()


@pytest.mark.parametrize("value", UNSTORABLE_VALUES)
def test_unstorable_decisions_are_refused(gated, unchanged, value):
    run = gated["approval"]
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="the decision for approval"):
        pw.approve_step(run.pk, "Manager sign-off", value)
    check()


def test_a_decision_over_max_input_bytes_is_refused(gated, unchanged, settings):
    settings.PIKKU_WORKFLOWS = {"MAX_INPUT_BYTES": 1000}
    run = gated["approval"]
    check = unchanged()
    with pytest.raises(pw.WorkflowInputError, match="MAX_INPUT_BYTES"):
        pw.approve_step(run.pk, "Manager sign-off", {"note": "x" * 2000})
    check()


# --- what workflow bodies do with bad values ---------------------------------------------------


@pytest.mark.parametrize(("workflow", "data", "shown"), [
    ("naps", {"nap": "forever"}, "'forever'"),
    ("naps", {"nap": -5}, "-5"),
    ("needs_approval", {"expiry": "soon"}, "'soon'"),
    ("needs_approval", {"expiry": "-1s"}, "'-1s'"),
])
def test_a_duration_that_does_not_parse_fails_the_run_naming_it(workflow, data, shown):
    run = pw.start_workflow(workflow, data)
    assert run.status == "failed" and run.error["code"] == "DEFINITION_ERROR"
    assert shown in run.error["message"]
    assert not WorkflowStep.objects.filter(run=run, step_name__in=(
        "Nap", "__workflow_approval:Manager sign-off")).exists()


def test_a_step_name_with_a_lone_surrogate_is_refused_on_both_databases():
    with registry.isolated():
        @pw.workflow(name="surrogate_step")
        def surrogate_step(wf, data):
            wf.do("A", lambda: 1)
            # Built at run time (as from data): the source itself holds no surrogate.
            return wf.do("bad " + chr(0xD800) + " name", lambda: 2)

        run = pw.start_workflow("surrogate_step", {})
    run.refresh_from_db()
    assert run.status == "failed" and run.error["code"] == "DEFINITION_ERROR"
    assert "lone surrogates" in run.error["message"]
    assert list(run.steps.values_list("step_name", flat=True)) == ["A"]


def test_unstorable_step_results_and_messages_fail_the_step_not_the_database():
    """A result holding NUL fails its step at once (like any non-JSON result); an
    exception message holding NUL is recorded escaped. On PostgreSQL both used to raise
    a DataError out of the pass, leaving the run leased and running."""
    with registry.isolated():
        @pw.function(name="returns_nul", retries=3)
        def returns_nul(data):
            return {"text": "a\x00b"}

        @pw.function(name="raises_nul", retries=0)
        def raises_nul(data):
            raise ValueError("bad byte \x00 here \ud800")

        @pw.workflow(name="nul_results")
        def nul_results(wf, data):
            return wf.do("Step", data["fn"], None)

        first = pw.start_workflow("nul_results", {"fn": "returns_nul"})
        second = pw.start_workflow("nul_results", {"fn": "raises_nul"})
    first.refresh_from_db()
    assert first.status == "failed" and "cannot be stored" in first.error["message"]
    assert first.steps.get().attempt_count == 1  # no retries for a result that cannot be
    second.refresh_from_db()
    assert second.status == "failed"
    assert "bad byte \\u0000 here \\ud800" in second.error["message"]
