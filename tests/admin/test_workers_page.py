"""The console's Workers and queues page: who may open it, what it says when runs are
inline or Redis is down, and what it reads from a real Redis (queues' backlog, warnings,
RQ worker records). Real ``pikku_worker`` processes on it:
tests/integration/test_workers_page_on_workers.py."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.engine.dispatch import all_queue_names
from pikku_workflows.engine.versions import definitions_fingerprint, package_version
from pikku_workflows.executors.rq import connection, get_queue, queue_stats, worker_health
from pikku_workflows.registry import registry
from tests.admin.test_console import staff_client

pytestmark = pytest.mark.django_db

ORCHESTRATOR = "pikku-workflow-orchestrator"
STEPS = "pikku-workflow-step-worker"


def page_url() -> str:
    return reverse("admin:pikku_workflows_workflowrun_workers")


def page(client) -> str:
    response = client.get(page_url())
    assert response.status_code == 200
    return response.content.decode()


def row(html: str, attribute: str, value: str) -> str:
    """The HTML of the table row ``<tr data-<attribute>="<value>" ...>``."""
    found = re.search(rf'<tr data-{attribute}="{re.escape(value)}"[^>]*>(.*?)</tr>', html,
                      flags=re.DOTALL)
    assert found, f"no row {attribute}={value}"
    return found.group(0)


def cell(row_html: str, name: str) -> str:
    found = re.search(rf'data-{name}="([^"]*)"', row_html)
    assert found, f"no data-{name} in {row_html}"
    return found.group(1)


def warned_queues(html: str) -> list[str]:
    return re.findall(r'class="errornote pk-queue-warning" data-queue="([^"]+)"', html)


# --- who may open it ---------------------------------------------------------------------


def test_only_staff_with_the_view_permission_on_runs_may_open_it(django_user_model):
    anonymous = Client()
    response = anonymous.get(page_url())
    assert response.status_code == 302 and "/login/" in response["Location"]
    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("visitor", password="pw"))
    response = visitor.get(page_url())
    assert response.status_code == 302 and "/login/" in response["Location"]
    nobody, _ = staff_client(django_user_model, "nobody")
    assert nobody.get(page_url()).status_code == 403
    # Another model's view permission is not the runs' either.
    versions, _ = staff_client(django_user_model, "versions", "view_workflowversion")
    assert versions.get(page_url()).status_code == 403
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowrun")
    assert viewer.get(page_url()).status_code == 200
    assert viewer.post(page_url()).status_code == 405  # nothing to post: a page to read


# --- without Redis -----------------------------------------------------------------------


def test_inline_runs_are_said_to_be_inline(admin_client):
    html = page(admin_client)
    assert 'data-executor="inline"' in html and "Runs execute <strong>inline</strong>" in html
    assert 'id="pk-workers"' not in html and 'id="pk-queues"' not in html


def test_another_executor_is_named(admin_client, settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "tests.testapp.executors.Threads"}
    html = page(admin_client)
    assert 'data-executor="custom"' in html
    assert "<code>tests.testapp.executors.Threads</code>" in html


def test_redis_down_is_a_message_not_an_error(admin_client, settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    html = page(admin_client)
    assert 'class="errornote pk-redis-error"' in html
    assert "Redis cannot be reached (ConnectionError" in html
    assert 'id="pk-workers"' not in html


def test_the_runs_list_and_its_banner_link_to_it(admin_client, settings):
    changelist = reverse("admin:pikku_workflows_workflowrun_changelist")
    link = f'href="{page_url()}" class="pk-workers-link"'
    assert admin_client.get(changelist).content.decode().count(link) == 1
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    html = admin_client.get(changelist).content.decode()
    assert "pk-banner" in html
    assert html.count(link) == 2  # the banner's and the list's


def test_django_rqs_dashboard_is_linked_not_copied(admin_client, settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    assert f'href="{reverse("admin:django_rq_home")}" class="pk-dashboard-link"' in \
        page(admin_client)


# --- on a real Redis, with no pikku_worker ------------------------------------------------


@pytest.fixture
def queued(rq_executor, transactional_db):
    """The rq executor on a real Redis, nothing draining it (jobs stay in their queues)."""


def test_the_queues_depth_oldest_job_and_warnings(admin_client, queued):
    runs = [pw.start_workflow("one_queued", i) for i in range(3)]
    assert all(run.status == "running" for run in runs)
    html = page(admin_client)
    orchestrator = row(html, "queue", ORCHESTRATOR)
    assert cell(orchestrator, "queued") == "3"  # the three runs' first passes
    assert cell(orchestrator, "oldest-seconds").isdigit()
    assert cell(orchestrator, "consumers") == "0"
    assert "workflow one_queued" in orchestrator
    steps = row(html, "queue", STEPS)
    assert cell(steps, "queued") == "0" and cell(steps, "oldest-seconds") == ""
    assert "function q_record" in steps
    # Every queue the registered definitions use is warned about: no worker is alive.
    used = {ORCHESTRATOR, f"{ORCHESTRATOR}.wake", STEPS, "pikku-test-dedicated-steps",
            "pikku-test-dedicated-runs", "pikku-test-dedicated-runs.wake"}
    assert used <= set(warned_queues(html))
    assert 'class="pk-no-workers"' in html
    # Every workflow queue has its row, in the order workers take them.
    assert re.findall(r'<tr data-queue="([^"]+)"', html) == all_queue_names()


def test_a_sleep_is_a_scheduled_job_with_its_time(admin_client, queued):
    from pikku_workflows.testing import drain_queues

    run = pw.start_workflow("sleeps_a_week", {})
    drain_queues()  # the first pass: a step, then the sleep's wake-up job for in 7 days
    run.refresh_from_db()
    assert run.status == "running"
    wake = row(page(admin_client), "queue", f"{ORCHESTRATOR}.wake")
    assert cell(wake, "scheduled") == "1" and cell(wake, "queued") == "0"
    assert re.search(r"in (\d+) s", wake) and 6 * 86400 < int(
        re.search(r"in (\d+) s", wake).group(1)) <= 7 * 86400


def test_a_live_rq_worker_record_is_listed_and_ends_the_warning(admin_client, queued):
    from rq import Worker

    from pikku_workflows.executors.worker import PikkuWorker

    redis = connection()
    plain = Worker([get_queue(ORCHESTRATOR)], connection=redis, name="plain-rq")
    plain.register_birth()
    pikku = PikkuWorker([get_queue(STEPS)], connection=redis, name="pikku-one",
                        serializer=get_queue(STEPS).serializer)
    pikku.register_birth()
    try:
        html = page(admin_client)
        listed = row(html, "worker", "pikku-one")
        assert cell(listed, "queues") == STEPS
        assert cell(listed, "code") == f"{package_version()} {definitions_fingerprint()}"
        assert "differs from this web process" not in listed
        assert cell(listed, "jobs") == "0" and "idle" in listed
        assert cell(row(html, "worker", "plain-rq"), "code") == " "  # not a pikku_worker
        assert "not recorded (not a pikku_worker)" in row(html, "worker", "plain-rq")
        assert cell(row(html, "queue", STEPS), "consumers") == "1"
        assert STEPS not in warned_queues(html) and ORCHESTRATOR not in warned_queues(html)
        assert f"{ORCHESTRATOR}.wake" in warned_queues(html)  # plain-rq serves no wake-ups
        # Code this web process does not have (another deploy): said on the worker's row.
        with registry.isolated():
            @pw.workflow(name="only_here")
            def only_here(wf, data):
                return data

            assert "differs from this web process" in row(page(admin_client), "worker",
                                                          "pikku-one")
    finally:
        pikku.register_death()
        plain.register_death()
    html = page(admin_client)
    assert 'data-worker="pikku-one"' not in html and 'class="pk-no-workers"' in html


def test_the_banner_and_the_page_share_one_liveness_rule(admin_client, queued):
    """A worker of a project's other queue is neither the banner's nor the page's."""
    from rq import Worker

    other = Worker(["emails"], connection=connection(), name="emails-worker")
    other.register_birth()
    try:
        assert worker_health() == []
        html = page(admin_client)
        assert 'data-worker="emails-worker"' not in html
        changelist = admin_client.get(reverse("admin:pikku_workflows_workflowrun_changelist"))
        assert "pk-banner" in changelist.content.decode()
    finally:
        other.register_death()


def test_queue_stats_reads_only_the_queues_asked(queued):
    pw.start_workflow("one_queued", 1)
    assert queue_stats([]) == []
    stats, = queue_stats([ORCHESTRATOR])
    assert stats["name"] == ORCHESTRATOR and stats["queued"] == 1
    assert stats["scheduled"] == 0 and stats["started"] == 0
    assert stats["oldest_enqueued_at"] is not None
