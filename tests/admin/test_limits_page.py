"""The console's Limits page: each named limit with its setting, override, slots in use,
waiting steps and oldest wait; the workflow concurrency table; overrides edited behind
``change_workflowlimit`` (checked, logged, applied at once); a waiting step's page names
its limit."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.admin.models import LogEntry
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.admin.limits import has_workflow_concurrency
from pikku_workflows.engine import limits
from pikku_workflows.models import WorkflowLimit, WorkflowRun, WorkflowStep
from pikku_workflows.runtime.orchestrator import run_pass
from pikku_workflows.status import StepStatus
from pikku_workflows.testing import fake_clock
from tests.admin.test_console import staff_client, url
from tests.settings import TEST_LIMITS

pytestmark = pytest.mark.django_db

LIMITED = {"DEFAULT_RETRY_DELAY": 0, "LIMITS": TEST_LIMITS}
REDIS_DOWN = {**LIMITED, "EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}


@pytest.fixture(autouse=True)
def _limits():
    limits.forget_overrides()
    with override_settings(PIKKU_WORKFLOWS=REDIS_DOWN), \
            fake_clock(datetime(2030, 1, 7, 9, 0, 0, tzinfo=UTC)) as clock:
        yield clock
    limits.forget_overrides()


def _row(text: str, name: str) -> str:
    found = re.search(rf'<tr data-limit="{name}">(.*?)</tr>', text, flags=re.S)
    assert found, f"no row for {name}"
    return found.group(1)


def _waiting_run(clock):
    """A run whose step waits for test_api (its one slot held by another attempt)."""
    held = limits.acquire(("test_api",))
    assert isinstance(held, limits.Held)
    run = pw.start_workflow("uses_limited", 1)
    assert run_pass(run.pk).kind == "paused"
    return run, held


def test_the_page_says_what_is_true(admin_client, _limits):
    _waiting_run(_limits)
    _limits.advance("20s")  # within the holder's lease (LEASE_TIMEOUT 30s)
    text = admin_client.get(url("workflowlimit_changelist")).content.decode()
    row = _row(text, "test_api")
    assert "concurrency 1" in row
    assert 'data-in-use="1"' in row and 'data-waiting="1"' in row
    assert 'data-oldest-wait="20"' in row
    rate = _row(text, "test_rate")
    assert "rate 2/min" in rate and 'data-in-use="0"' in rate and 'data-waiting="0"' in rate
    assert "override</a>" in rate  # a superuser may add an override
    assert 'id="pk-workflow-concurrency"' in text


def test_an_override_is_shown_with_who_made_it(admin_client, django_user_model):
    user = django_user_model.objects.get(username="admin")
    WorkflowLimit.objects.create(name="test_api", concurrency=4, rate="10/s", updated_by=user)
    WorkflowLimit.objects.create(name="gone", concurrency=2)
    text = admin_client.get(url("workflowlimit_changelist")).content.decode()
    row = _row(text, "test_api")
    assert "concurrency 4 · rate 10/s" in row and "admin" in row and "edit override" in row
    assert "limits nothing" in _row(text, "gone")


def test_viewing_needs_the_view_permission(django_user_model):
    nobody, _ = staff_client(django_user_model, "nobody")
    assert nobody.get(url("workflowlimit_changelist")).status_code == 403
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowlimit")
    page = viewer.get(url("workflowlimit_changelist"))
    assert page.status_code == 200
    assert "pk-limit-edit" not in page.content.decode()  # no link to change anything
    assert viewer.post(url("workflowlimit_add"), {"name": "test_api", "concurrency": 3}
                       ).status_code == 403
    assert not WorkflowLimit.objects.exists()


def test_an_override_changes_the_limit_at_once_and_is_logged(django_user_model):
    editor, user = staff_client(django_user_model, "editor", "view_workflowlimit",
                                "add_workflowlimit", "change_workflowlimit")
    assert isinstance(limits.acquire(("test_api",)), limits.Held)
    assert isinstance(limits.acquire(("test_api",)), limits.Blocked)
    response = editor.post(url("workflowlimit_add"),
                           {"name": "test_api", "concurrency": "2", "rate": ""})
    assert response.status_code == 302
    override = WorkflowLimit.objects.get(name="test_api")
    assert (override.concurrency, override.rate, override.updated_by) == (2, None, user)
    assert isinstance(limits.acquire(("test_api",)), limits.Held)
    response = editor.post(url("workflowlimit_change", override.pk),
                           {"concurrency": "", "rate": "1/h"})
    assert response.status_code == 302
    assert limits.effective("test_api").concurrency == 1  # back to the setting's
    assert limits.effective("test_api").rate == (1, 3600.0)
    logged = LogEntry.objects.filter(object_id=str(override.pk), user=user)
    assert logged.count() == 2


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "nowhere", "concurrency": "2"}, "declares no limit"),
    ({"name": "test_api", "concurrency": "0"}, "greater than or equal to 1"),
    ({"name": "test_api", "rate": "lots"}, "invalid rate"),
    ({"name": "test_api", "rate": "0/s"}, "at least 1 start"),
])
def test_a_bad_override_is_refused_and_nothing_written(admin_client, data, message):
    response = admin_client.post(url("workflowlimit_add"), data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not WorkflowLimit.objects.exists()


def test_changing_needs_the_change_permission(django_user_model):
    override = WorkflowLimit.objects.create(name="test_api", concurrency=2)
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowlimit")
    assert viewer.post(url("workflowlimit_change", override.pk),
                       {"concurrency": "9"}).status_code == 403
    assert WorkflowLimit.objects.get().concurrency == 2


def test_a_waiting_step_s_page_names_its_limit(admin_client, _limits):
    run, _ = _waiting_run(_limits)
    step = WorkflowStep.objects.get(run=run)
    assert step.status == StepStatus.SCHEDULED
    text = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    assert "waiting for limit test_api: next try at" in text


def test_the_workflow_concurrency_table_shows_when_each_wait_began(admin_client, _limits):
    text = admin_client.get(url("workflowlimit_changelist")).content.decode()
    if not has_workflow_concurrency():
        # Before workflow concurrency's run fields exist, the table says so.
        assert "Workflow concurrency is not available" in text
        return

    def start(customer, n):
        return pw.start_workflow("flow_per_customer", {"customer": customer, "n": n},
                                 inline=True)

    holder = start("acme", 1)  # holds acme's slot (suspended)
    # A child run of the same workflow and key runs under its parent's slot.
    WorkflowRun.objects.create(workflow="flow_per_customer", concurrency_key="acme",
                               status="running", parent_run=holder, input={})
    retried = start("acme", 2)  # queued, then failed (its deadline, say)
    WorkflowRun.objects.filter(pk=retried.pk).update(status="failed", waiting_for="",
                                                     waiting_since=None)
    parked = start("zeta", 1)  # parked for an operator: it holds no slot
    WorkflowRun.objects.filter(pk=parked.pk).update(
        error={"code": "RPC_NOT_FOUND", "message": "step function missing"})
    _limits.advance("60s")
    assert pw.retry_run(retried.pk).status == "scheduled"  # it waits from now on
    _limits.advance("10s")
    start("acme", 3)  # waits from now on
    _limits.advance("20s")
    text = admin_client.get(url("workflowlimit_changelist")).content.decode()
    row = re.search(r'<tr data-workflow="flow_per_customer" data-key="acme">(.*?)</tr>',
                    text, re.S)
    assert row is not None
    assert 'data-in-use="1"' in row.group(1) and 'data-waiting="2"' in row.group(1)
    # The retried run waits since its retry, 30 s ago (not since it was created, 90 s ago).
    assert 'data-oldest-wait="30"' in row.group(1)
    assert WorkflowRun.objects.get(pk=retried.pk).waiting_since == \
        datetime(2030, 1, 7, 9, 1, 0, tzinfo=UTC)
    zeta = re.search(r'<tr data-workflow="flow_per_customer" data-key="zeta">(.*?)</tr>',
                     text, re.S)
    assert zeta is not None and 'data-in-use="0"' in zeta.group(1)


def test_an_override_s_history_and_delete_pages(django_user_model):
    override = WorkflowLimit.objects.create(name="test_api", concurrency=2)
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowlimit")
    assert viewer.get(url("workflowlimit_history", override.pk)).status_code == 200
    assert viewer.get(url("workflowlimit_change", override.pk)).status_code == 200
    assert viewer.post(url("workflowlimit_delete", override.pk), {"post": "yes"}
                       ).status_code == 403
    assert WorkflowLimit.objects.filter(pk=override.pk).exists()
    deleter, user = staff_client(django_user_model, "deleter", "view_workflowlimit",
                                 "delete_workflowlimit")
    assert deleter.get(url("workflowlimit_delete", override.pk)).status_code == 200
    assert deleter.post(url("workflowlimit_delete", override.pk), {"post": "yes"}
                        ).status_code == 302
    assert not WorkflowLimit.objects.exists()
    assert limits.effective("test_api").concurrency == 1  # the setting's again
    assert LogEntry.objects.filter(user=user, object_id=str(override.pk)).exists()
