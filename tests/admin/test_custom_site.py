"""The console on a project's own AdminSite: the package's ModelAdmins registered on a
site named "ops" (mounted at /ops/) serve every page, and every link, form and redirect
they give stays on that site. Either beside Django's default site (whose URLs of the same
names are at /admin/) or with a default site that holds none of them (where reversing
``admin:pikku_workflows_...`` finds nothing)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils.timezone import now

import pikku_workflows as pw
from pikku_workflows import operations
from pikku_workflows.models import (
    WorkflowEvent,
    WorkflowLimit,
    WorkflowRun,
    WorkflowSchedule,
    WorkflowVersion,
)
from tests.conftest import runs_in_each_state
from tests.console_urls import console_url_names
from tests.settings import TEST_LIMITS

pytestmark = pytest.mark.django_db

#: A path under the default site: "/admin/" not preceded by a path character (so not
#: "/static/admin/", the admin's own static files). django-rq's dashboard is on the
#: default site (it adds itself there): the link to it rightly goes there.
DEFAULT_SITE_LINK = re.compile(r"(?<![\w/.-])/admin/(?!django_rq/)")


@pytest.fixture(params=["tests.admin.urls_custom_site", "tests.admin.urls_custom_site_only"])
def ops(request, settings):
    settings.ROOT_URLCONF = request.param
    return request.param


@pytest.fixture
def objects():
    """A run in each state, a parent with its child, a run waiting for an event, an
    event, a schedule that fired, a limit override."""
    from datetime import timedelta

    made = runs_in_each_state()
    made["parent"] = pw.start_workflow("parent", {"child": "child_ok"})
    made["child"] = WorkflowRun.objects.get(parent_run=made["parent"])
    made["waiting"] = pw.start_workflow("ev_wait", {"order": "order-8", "timeout": "1h"})
    made["event"] = WorkflowEvent.objects.get(
        pk=pw.send_event("other.topic", {"amount": 1}, key="order-1").id)
    made["schedule"] = WorkflowSchedule.objects.create(
        name="every-minute", workflow="sequential", source="admin", input={"x": 1},
        every=60.0, next_fire_at=now() + timedelta(seconds=30))
    operations.trigger_schedule("every-minute")
    made["limit"] = WorkflowLimit.objects.create(name="test_api", concurrency=2)
    return made


def ops_url(name: str, *args: object) -> str:
    return reverse(f"ops:pikku_workflows_{name}", args=args)


def console_names() -> list[str]:
    """Every URL name of the package's admins on the ops site."""
    from tests.admin.urls_custom_site import ops_site

    return [name.removeprefix("pikku_workflows_") for name in console_url_names(ops_site)]


def console_urls(objects) -> list[str]:
    """Each console URL name reversed on the ops site, with an object of its model."""
    ids = {"workflowversion": WorkflowVersion.objects.first().pk,
           "workflowevent": objects["event"].pk,
           "workflowschedule": objects["schedule"].pk, "workflowlimit": objects["limit"].pk}
    urls = []
    for name in console_names():
        model = name.split("_", 1)[0]
        object_id = ids.get(model, objects["gated"].pk)
        for args in ((), (object_id,)):
            try:
                urls.append(ops_url(name, *args))
                break
            except Exception:  # this name takes other arguments
                continue
    return sorted(set(urls))


def assert_on_ops(response, url: str) -> None:
    assert response.status_code in (200, 302, 403, 405), (url, response.status_code)
    if response.status_code == 302:
        assert response["Location"].startswith("/ops/"), (url, response["Location"])
        return
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode()
    found = DEFAULT_SITE_LINK.search(text)
    assert found is None, (url, text[max(found.start() - 200, 0):found.end() + 200])


def test_every_console_page_serves_and_links_on_the_sites_own_prefix(admin_client, ops,
                                                                    objects, settings):
    # The Redis banner (with its links to the Workers page) on the lists, the declared
    # limits (with their "add an override" links) on the Limits page.
    settings.PIKKU_WORKFLOWS = {"DEFAULT_RETRY_DELAY": 0, "LIMITS": TEST_LIMITS,
                                "EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    urls = console_urls(objects)
    assert len(urls) > 30, urls
    for page in ("workflowrun_changelist", "rundashboard_changelist",
                 "workflowrun_workers", "workflowlimit_changelist",
                 "workflowschedule_changelist", "workflowevent_changelist",
                 "registeredworkflow_changelist", "workflowversion_changelist",
                 "failedrun_changelist", "suspendedrun_changelist"):
        assert ops_url(page) in urls, page
    runs = [objects[key] for key in ("failed", "gated", "suspended", "done", "parent",
                                     "child", "waiting")]
    urls += [ops_url("workflowrun_change", run.pk) for run in runs]
    urls += [ops_url("workflowrun_live", run.pk) for run in runs]
    urls += [ops_url("workflowrun_changelist") + f"?waiting={kind}"
             for kind in ("event", "message")]
    urls += [ops_url("workflowrun_fork", objects["failed"].pk),
             ops_url("workflowevent_change", objects["event"].pk),
             ops_url("workflowschedule_change", objects["schedule"].pk),
             ops_url("workflowlimit_change", objects["limit"].pk),
             ops_url("rundashboard_changelist") + "?span=1h"]
    shown = 0
    for url in urls:
        assert url.startswith("/ops/"), url
        response = admin_client.get(url)
        assert_on_ops(response, url)
        shown += response.status_code == 200
    assert shown > 30
    # The pages do link within the site.
    run_page = admin_client.get(ops_url("workflowrun_change", objects["parent"].pk))
    text = run_page.content.decode()
    assert f'href="{ops_url("workflowrun_change", objects["child"].pk)}"' in text
    listed = admin_client.get(ops_url("workflowrun_changelist")).content.decode()
    assert f'href="{ops_url("workflowrun_workers")}"' in listed
    assert f'href="{ops_url("workflowrun_changelist")}?waiting=event"' in listed


def test_actions_and_forms_redirect_within_the_site(admin_client, ops, objects):
    suspended = objects["suspended"]
    cancelled = admin_client.post(ops_url("workflowrun_cancel", suspended.pk),
                                  {"reason": "x"})
    assert cancelled.status_code == 302
    assert cancelled["Location"] == ops_url("workflowrun_change", suspended.pk)
    assert WorkflowRun.objects.get(pk=suspended.pk).status == "cancelled"
    sent = admin_client.post(ops_url("workflowevent_send"),
                             {"event": "payment.succeeded", "key": "order-8",
                              "payload": '{"amount": 3}'})
    assert sent.status_code == 302 and sent["Location"].startswith("/ops/"), sent
    paused = admin_client.post(ops_url("workflowschedule_pause", objects["schedule"].pk))
    assert paused.status_code == 302 and paused["Location"].startswith("/ops/"), paused
    forked = admin_client.post(ops_url("workflowrun_fork", objects["failed"].pk),
                               {"reason": "again"})
    assert forked.status_code == 302 and forked["Location"].startswith("/ops/"), forked
