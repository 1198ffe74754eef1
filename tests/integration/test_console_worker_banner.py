"""The console's worker banner against a real Redis and real ``pikku_worker`` processes,
the idle worker's case seen in a real browser (Debian's Chromium, Playwright). The banner
without Redis, and its dashboard link, are in tests/admin/test_pages.py."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.urls import reverse

from tests.integration import test_console_browser as console_browser
from tests.services import wait_for

# The fixtures of test_console_browser.py (a browser, the live server, a signed-in page).
browser = console_browser.browser
server = console_browser.server
staff_page = console_browser.staff_page

BANNER = "pk-banner"
# How long an idle worker must keep the banner away (the issue: an idle RQ worker's
# heartbeat came every ~7 minutes, and the banner said "no worker" after one).
IDLE_FOR = 180.0


def banner_shown(client) -> bool:
    page = client.get(reverse("admin:pikku_workflows_workflowrun_changelist"))
    assert page.status_code == 200
    return BANNER in page.content.decode()


def banner_seen(page, server) -> bool:
    """Whether Chromium shows the banner on the runs list (loaded afresh)."""
    response = page.goto(server.url + reverse("admin:pikku_workflows_workflowrun_changelist"))
    assert response is not None and response.status == 200
    banner = page.locator(f".{BANNER}")
    return banner.count() > 0 and banner.first.is_visible()


@pytest.mark.postgres_only
def test_the_worker_banner_goes_once_a_worker_registers(admin_client, rq_settings):
    from rq import Worker

    from pikku_workflows.executors.rq import connection

    redis = connection()
    assert banner_shown(admin_client)
    worker = Worker(["pikku-workflow-orchestrator"], connection=redis)
    worker.register_birth()
    assert not banner_shown(admin_client)
    worker.register_death()  # a clean stop leaves RQ's registry at once
    assert banner_shown(admin_client)
    # A worker of other queues (a project's own rqworker) is no pikku_worker.
    other = Worker(["emails"], connection=redis)
    other.register_birth()
    try:
        assert banner_shown(admin_client)
    finally:
        other.register_death()


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_keeps_the_banner_away_and_a_killed_one_brings_it(
        staff_page, server, rq_settings, workers):
    """A real ``pikku_worker`` with the production settings (``WORKER_TTL`` 30: it beats
    every 15 s while idle, RQ holds it alive 90 s after a beat), idle for three real
    minutes: no banner at any look. Then SIGKILL (no goodbye to RQ): the banner comes
    once RQ's key for it lapses, within ``WORKER_TTL + 60`` s of its last beat. Nothing is
    shortened: this is the mechanism and the timing production runs."""
    from pikku_workflows.conf import pikku_settings

    assert "WORKER_TTL" not in rq_settings  # the default, as deployed
    ttl = pikku_settings.WORKER_TTL
    page = staff_page
    assert banner_seen(page, server)  # no worker yet
    worker, = workers.start(1)
    assert not banner_seen(page, server)
    # RQ holds it alive for WORKER_TTL + 60 s after a beat (RQ's default TTL: 420 + 60).
    from rq import Worker

    from pikku_workflows.executors.rq import connection

    registered, = Worker.all(connection=connection())
    assert 0 < connection().ttl(registered.key) <= ttl + 60
    idle_until = time.monotonic() + IDLE_FOR
    looks = 0
    while time.monotonic() < idle_until:
        assert not banner_seen(page, server), f"banner after {looks * 5} s of idling"
        looks += 1
        time.sleep(5)
    assert worker.poll() is None  # still the same, idle worker
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    killed_at = time.monotonic()
    wait_for(lambda: banner_seen(page, server), timeout=ttl + 60 + 10, interval=1)
    assert time.monotonic() - killed_at <= ttl + 60 + 10
    assert "pikku_worker" in page.locator(f".{BANNER}").first.inner_text()
