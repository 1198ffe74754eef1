"""``pikku_start --wait`` following a run on the rq executor (jobs drained in this
process). The other command tests are in tests/unit/test_commands.py."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management.base import CommandError
from django.db import connection

from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain_queues
from tests.unit.test_commands import start


@pytest.mark.django_db(transaction=True)
def test_start_wait_follows_a_run_on_workers(rq_executor):
    result: dict = {}

    def command() -> None:  # the shell's command, while this thread is the worker
        try:
            result["lines"] = start("ten_steps", "{}", "--wait", "--timeout", "60")
        except BaseException as exc:
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=command)
    thread.start()
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        drain_queues()  # like pikku_worker --burst (RQ workers need the main thread)
        thread.join(timeout=0.05)  # the command ends, or sends the run's next jobs
    thread.join()
    assert "error" not in result, result
    run = WorkflowRun.objects.get()
    assert run.status == "completed" and run.inline is False
    lines = result["lines"]
    assert lines[0].startswith(f"run {run.pk} of ten_steps completed in ")
    assert lines[0].endswith("(10 steps succeeded)")
    assert lines[1:] == ["45"]


@pytest.mark.django_db(transaction=True)
def test_start_wait_gives_up_after_its_timeout(rq_executor):
    with pytest.raises(CommandError, match=r"still running after 0\.3s") as raised:
        start("ten_steps", "{}", "--wait", "--timeout", "0.3")
    assert raised.value.returncode == 4
    assert WorkflowRun.objects.get().status == "running"  # nobody worked on it
