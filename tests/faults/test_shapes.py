"""Property: any workflow shape ends the same inline and on RQ (status, output, steps)."""

from __future__ import annotations

from typing import Any

from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.services import SETTINGS

from .test_delivery import drain_until_finished

# Up to 3 failures: with retries=2, a step failing 3 times fails the run.
fails = st.integers(min_value=0, max_value=3)
ops = st.one_of(
    st.tuples(st.just("do"), fails),
    st.tuples(st.just("parallel"), st.lists(fails, min_size=1, max_size=4)),
    st.tuples(st.just("sleep")),
    st.tuples(st.just("suspend")),
    st.tuples(st.just("branch"), st.integers(min_value=0, max_value=9)),
)
shapes = st.lists(ops, min_size=1, max_size=6)


def named(shape: list[tuple]) -> list[list[Any]]:
    """The ops with distinct step names (their index), as ``fault_shape`` reads them."""
    return [[op[0], f"{op[0]} {i}", *op[1:]] for i, op in enumerate(shape)]


def outcome(run_id: Any) -> dict[str, Any]:
    run = WorkflowRun.objects.get(pk=run_id)
    steps = dict(WorkflowStep.objects.filter(run=run).values_list("step_name", "status"))
    error = run.error or {}
    return {"status": run.status, "output": run.output, "steps": steps,
            "error": (error.get("code"), error.get("step"))}


def finish(run_id: Any, advance: Any) -> dict[str, Any]:
    """Resume each suspension (with its gate's name) until the run ends."""
    for _ in range(10):
        advance(run_id)
        run = WorkflowRun.objects.get(pk=run_id)
        if run.status != RunStatus.SUSPENDED:
            break
        pw.resume_run(run_id, {"resumed": run.error["step"]})
    return outcome(run_id)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(shape=shapes)
def test_a_random_shape_ends_the_same_inline_and_on_rq(rq_settings, shape):
    data = {"ops": named(shape)}
    with override_settings(PIKKU_WORKFLOWS={**SETTINGS, "EXECUTOR": "inline"}):
        inline = finish(pw.start_workflow("fault_shape", {**data, "fn": "fault_flaky_echo_here"}
                                          ).pk, lambda run_id: None)
    with override_settings(PIKKU_WORKFLOWS={**SETTINGS, "EAGER_QUEUED_STEPS": False}):
        queued = finish(pw.start_workflow("fault_shape", {**data, "fn": "fault_flaky_echo"}
                                          ).pk, lambda run_id:
                        drain_until_finished([run_id], timeout=60, or_suspended=True))
    assert queued == inline
    assert inline["status"] in (RunStatus.COMPLETED, RunStatus.FAILED)

