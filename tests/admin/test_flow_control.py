"""The run page says why a run waits under flow control (DESIGN 8.4): the concurrency slot
of its workflow and key with the number of runs holding one, its debounce window, its
deadline."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import pikku_workflows as pw
from pikku_workflows.testing import fake_clock, run_inline
from tests.admin.test_console import url

pytestmark = pytest.mark.django_db

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def inline():
    with fake_clock(T0), run_inline():
        yield


def page_of(admin_client, run):
    answer = admin_client.get(url("workflowrun_change", run.pk))
    assert answer.status_code == 200
    return answer.content.decode()


def test_a_run_queued_for_a_slot_says_which_workflow_key_and_how_many_hold_it(admin_client):
    holder = pw.start_workflow("flow_per_customer", {"customer": "acme", "n": 1})
    queued = pw.start_workflow("flow_per_customer", {"customer": "acme", "n": 2})
    page = page_of(admin_client, queued)
    assert ("waiting for a concurrency slot of flow_per_customer (key acme): 1 running"
            in page)
    assert 'data-wait="concurrency"' in page
    assert "waiting for a concurrency slot" not in page_of(admin_client, holder)
    pw.resume_run(holder.pk)
    assert "waiting for a concurrency slot" not in page_of(admin_client, queued)


def test_a_debounced_run_says_when_its_window_ends_and_a_deadline_shows(admin_client):
    run = pw.start_workflow("flow_echo", 1, debounce=pw.Debounce("doc-7", "5s"))
    pw.start_workflow("flow_echo", 2, debounce=pw.Debounce("doc-7", "5s"))
    page = page_of(admin_client, run)
    assert "waiting for its debounce window (key doc-7) to end at" in page
    assert "after 2 start(s)" in page
    timed = pw.start_workflow("flow_waits", "suspend", run_timeout="1h")
    assert 'class="pk-deadline"' in page_of(admin_client, timed)
    assert 'class="pk-deadline"' not in page
