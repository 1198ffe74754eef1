"""``POST workflows/{name}/run/`` waits at most ``timeout`` (``RUN_TIMEOUT`` by default
and at most): past it, 202 with the run's id, and the run is left to recovery, which
finishes it."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.testing import fake_clock
from tests.services import sweep_after

from .conftest import API

pytestmark = pytest.mark.django_db

RUN = f"{API}workflows/sleeps_a_week/run/"


def left_waiting(response) -> WorkflowRun:
    """The run a 202 from run/ names: running, not leased, its sleep on the step."""
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == {"id", "status"} and body["status"] == "running"
    assert response["Location"] == f"http://testserver{API}runs/{body['id']}/"
    run = WorkflowRun.objects.get(pk=body["id"])
    assert run.status == "running" and run.lease_owner == "" and run.inline
    sleep = WorkflowStep.objects.get(run=run, step_name="A week")
    assert sleep.status == "scheduled" and sleep.wake_at is not None
    return run


def test_past_its_timeout_run_answers_202_and_recovery_finishes_the_run(owner):
    with fake_clock() as clock:
        response = owner.post(RUN, {"data": {}, "timeout": "1s"}, format="json")
        run = left_waiting(response)
        call_command("pikku_recover", stdout=None)  # not due yet: still waiting
        run.refresh_from_db()
        assert run.status == "running"
        clock.advance("7d")
        clock.sleep(5)  # past the sweep's grace for due wake-ups
        call_command("pikku_recover")
    run.refresh_from_db()
    assert run.status == "completed" and run.output == "after"
    # The owner reads it where Location pointed.
    assert owner.get(response["Location"]).json()["output"] == "after"


def test_without_a_timeout_run_waits_run_timeout(owner):
    with override_settings(PIKKU_WORKFLOWS={"DEFAULT_RETRY_DELAY": 0, "RUN_TIMEOUT": "2s"}
                           ), fake_clock() as clock:
        started = clock.now()
        run = left_waiting(owner.post(RUN, {"data": {}}, format="json"))
        assert (clock.now() - started).total_seconds() == pytest.approx(2, abs=0.5)
    assert run.status == "running"


def test_a_real_wait_ends_at_the_timeout_and_the_run_goes_on(owner):
    with registry.isolated():
        @pw.workflow(name="short_nap")
        def short_nap(wf, data):
            wf.do("Before", "echo", "before")
            wf.sleep("A week", "3s")
            return wf.do("After", "echo", "after")

        started = time.monotonic()
        response = owner.post(f"{API}workflows/short_nap/run/", {"timeout": 1},
                              format="json")
        waited = time.monotonic() - started
        run = left_waiting(response)
        assert 0.9 <= waited < 2.5, waited
        assert sweep_after(5)["due"] == 1  # what pikku_recover does once the nap is due
    run.refresh_from_db()
    assert run.status == "completed" and run.output == "after"


def test_a_run_settled_in_time_answers_as_before(owner):
    done = owner.post(f"{API}workflows/sequential/run/", {"data": {"x": 2}, "timeout": 5},
                      format="json")
    assert done.status_code == 200 and done.json()["output"] == {"total": 3, "doubled": 6}


@pytest.mark.parametrize("timeout", ["31s", "1h", 0, "0s", -1, "soon", True, [1]])
def test_a_timeout_over_run_timeout_or_not_a_duration_is_400(owner, timeout):
    response = owner.post(RUN, {"data": {}, "timeout": timeout}, format="json")
    assert response.status_code == 400, response.content
    assert "timeout" in response.json()["errors"]
    assert not WorkflowRun.objects.exists()
