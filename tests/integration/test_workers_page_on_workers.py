"""The Workers and queues page with real ``pikku_worker`` processes on two queues: it
lists them with their queues, code and current job, a clean stop (SIGTERM) removes one,
a queue nobody consumes is warned about, and depth counts the jobs enqueued. The page's
permissions, inline and Redis-down cases are in tests/admin/test_workers_page.py."""

from __future__ import annotations

import re
import signal
import socket

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.versions import package_version
from tests.admin.test_workers_page import cell, page, row, warned_queues
from tests.services import wait_for

ORCHESTRATOR = "pikku-workflow-orchestrator"
STEPS = "pikku-workflow-step-worker"
DEDICATED_RUNS = "pikku-test-dedicated-runs"  # the queue of workflow "isolated"


def test_the_page_follows_real_workers(admin_client, workers):
    runner, = workers.start(1, "--queues", ORCHESTRATOR)
    stepper, = workers.start(1, "--queues", STEPS)
    html = page(admin_client)
    by_pid = {cell(row(html, "worker", name), "pid"): name
              for name in _worker_names(html)}
    assert set(by_pid) == {str(runner.pid), str(stepper.pid)}
    runner_row = row(html, "worker", by_pid[str(runner.pid)])
    stepper_row = row(html, "worker", by_pid[str(stepper.pid)])
    # pikku_worker --queues adds an orchestrator queue's wake-up queue, served first.
    assert cell(runner_row, "queues") == f"{ORCHESTRATOR}.wake {ORCHESTRATOR}"
    assert cell(stepper_row, "queues") == STEPS
    # The code they run: this package's version and the definitions a process of the
    # same settings registers (asked of such a process; the shell prints a banner first).
    fingerprint = workers.run(
        "shell", "-c", "from pikku_workflows.engine.versions import "
        "definitions_fingerprint as f; print(f())").strip().splitlines()[-1]
    for listed in (runner_row, stepper_row):
        assert f"<td data-host>{socket.gethostname()}</td>" in listed
        assert cell(listed, "heartbeat-seconds").isdigit()
        assert cell(listed, "code") == f"{package_version()} {fingerprint}"
        assert "idle" in listed
    # Both shared queues are consumed; the dedicated queues of the test workflows are not.
    warned = warned_queues(html)
    assert ORCHESTRATOR not in warned and STEPS not in warned
    assert {DEDICATED_RUNS, f"{DEDICATED_RUNS}.wake", "pikku-test-dedicated-steps"} <= \
        set(warned)

    # Depth counts the jobs enqueued on a queue nobody consumes.
    for i in range(3):
        pw.start_workflow("isolated", {"n": i})
    html = page(admin_client)
    dedicated = row(html, "queue", DEDICATED_RUNS)
    assert cell(dedicated, "queued") == "3" and cell(dedicated, "consumers") == "0"
    assert cell(dedicated, "oldest-seconds").isdigit()
    assert "(3 queued now)" in html and "workflow isolated" in dedicated

    # A worker's current job, and what it is: the step it runs, of which run.
    slow = pw.start_workflow("slow_charge", {"first_attempt_seconds": 60})

    def running_the_step() -> bool:
        listed = row(page(admin_client), "worker", by_pid[str(stepper.pid)])
        return f'data-job-kind="step" data-run="{slow.pk}" data-step="Charge"' in listed

    wait_for(running_the_step, timeout=30)
    listed = row(page(admin_client), "worker", by_pid[str(stepper.pid)])
    assert cell(listed, "jobs") == "1" and f"from <code>{STEPS}</code>" in listed
    assert f'href="/admin/pikku_workflows/workflowrun/{slow.pk}/change/"' in listed
    assert cell(row(page(admin_client), "queue", STEPS), "started") == "1"

    # A clean stop (SIGTERM) leaves RQ's registry at once: the page no longer lists it,
    # and its queue, which runs use, is warned about.
    workers.kill(runner, signal.SIGTERM)
    assert runner.returncode == 0
    html = page(admin_client)
    assert set(_worker_names(html)) == {by_pid[str(stepper.pid)]}
    assert ORCHESTRATOR in warned_queues(html) and STEPS not in warned_queues(html)


def _worker_names(html: str) -> list[str]:
    return re.findall(r'<tr data-worker="([^"]+)"', html)


@pytest.fixture
def admin_client(client, django_user_model, rq_settings):
    """A superuser's client on the committed test database the workers share."""
    user = django_user_model.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(user)
    return client
