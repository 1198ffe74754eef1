"""What the console's pages say is true: times in the user's zone, a body failure shown
where it happened (to staff only), the dashboard link, the wording of bulk actions."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from django.urls import reverse
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.admin.workers import worker_banner
from pikku_workflows.models import WorkflowRun
from tests.conftest import API

pytestmark = pytest.mark.django_db


def url(name, *args):
    return reverse(f"admin:pikku_workflows_{name}", args=args)


def page_of(client, run) -> str:
    response = client.get(url("workflowrun_change", run.pk))
    assert response.status_code == 200
    return response.content.decode()


# --- times --------------------------------------------------------------------------------


def shown_times(html: str) -> list[tuple[str, str, str]]:
    """(datetime attribute, tooltip, text) of every <time> of a page."""
    return re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', html)


def test_run_page_times_are_in_the_users_zone_with_the_zone_shown(admin_client):
    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 1})
    with timezone.override("America/New_York"):
        html = page_of(admin_client, run)
        listed = admin_client.get(url("workflowrun_changelist")).content.decode()
    times = shown_times(html)
    # Created, updated, finished; each attempt's created, running and ended; the audit's
    # start.
    assert len(times) == 3 + 2 * 3 + 1
    local = timezone.localtime(run.created_at, timezone=_zone("America/New_York"))
    zone = local.tzname()
    summary = [text for _, _, text in times[:3]]
    for text in summary:
        assert text.endswith(f" {zone}")
    # The list's own rendering of the creation time, plus the zone.
    list_text = _list_format(local)
    assert list_text in listed
    assert summary[0] == f"{list_text} {zone}"
    for attribute, tooltip, _ in times:
        moment = datetime.fromisoformat(attribute)
        assert moment.tzinfo is not None
        # The tooltip is the exact time in the user's zone, to the microsecond.
        assert tooltip.startswith(timezone.localtime(
            moment, timezone=_zone("America/New_York")).isoformat(sep=" "))
    assert "Times in America/New_York" in html
    assert not re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}<", html)  # no raw stamps


def _zone(name):
    import zoneinfo
    return zoneinfo.ZoneInfo(name)


def _list_format(moment) -> str:
    from django.utils import formats
    return formats.date_format(moment, "DATETIME_FORMAT")


# --- a failure in the workflow body ---------------------------------------------------------


def test_a_body_failure_on_the_input_is_shown_to_staff_without_a_retry(admin_client, staff):
    run = pw.start_workflow("fails_on_input", {"order_id": 8})
    assert run.status == "failed" and run.error["code"] == "KeyError"
    html = page_of(admin_client, run)
    assert "builtins.KeyError" in html and "before any step" in html
    assert "workflows_pages.py:" in html and "in _parse_amount" in html  # the line reached
    trace = re.search(r'<details class="pk-traceback" open>.*?<pre>(.*?)</pre>', html, re.S)
    assert trace and "_parse_amount(data)" in trace.group(1)
    assert "orchestrator.py" not in trace.group(1)  # the user's code, not the engine's
    assert html.count("Traceback (most recent call last)") == 1  # not again in the JSON
    assert "pk-tool-retry" not in html
    assert "pk-tool-delete" in html  # the other actions remain
    # The API never shows it: neither the detail, the list nor get_run_status.
    detail = staff.get(f"{API}runs/{run.pk}/").json()
    listed = staff.get(f"{API}runs/").json()
    for shown in (detail["error"], pw.get_run_status(run.pk)["error"],
                  *[r["error"] for r in listed["results"]]):
        assert set(shown) <= {"message", "code", "step"}
        assert "Traceback" not in str(shown)


def test_a_body_failure_after_a_step_names_the_step_and_may_be_retried(admin_client):
    run = pw.start_workflow("fails_after_a_step", {})
    assert run.status == "failed" and run.error["code"] == "ZeroDivisionError"
    html = page_of(admin_client, run)
    assert re.search(r'after the step <a href="#[^"]+">Count(#1)?</a>', html)
    assert "builtins.ZeroDivisionError" in html and "in fails_after_a_step" in html
    assert "pk-tool-retry" in html


def test_a_step_failure_shows_no_body_traceback(admin_client):
    run = pw.start_workflow("retrying", {"fail_times": 5, "retries": 0})
    html = page_of(admin_client, run)
    assert run.status == "failed" and "pk-traceback" not in html
    assert "pk-tool-retry" in html


# --- the banner's dashboard link, the bulk wording ---------------------------------------


def test_the_banner_links_to_the_django_rq_dashboard_installed(settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    # django_rq in INSTALLED_APPS puts its dashboard in the admin.
    assert worker_banner()["dashboard"] == reverse("admin:django_rq_home")
    # A project that includes django_rq's URLs (django-rq 4: namespace "django_rq").
    settings.ROOT_URLCONF = "tests.admin.urls_with_django_rq"
    assert worker_banner()["dashboard"] == "/django-rq/"


def test_the_banner_link_is_on_the_runs_list(admin_client, settings):
    settings.PIKKU_WORKFLOWS = {"EXECUTOR": "rq", "RQ_CONNECTION": "unreachable"}
    body = admin_client.get(url("workflowrun_changelist")).content.decode()
    assert f'href="{reverse("admin:django_rq_home")}"' in body


def test_bulk_confirmation_says_retried_not_retryed(admin_client):
    failed = pw.start_workflow("retrying", {"fail_times": 5, "retries": 0})
    body = {"action": "retry_runs", "select_across": "0", "index": "0",
            "_selected_action": [str(failed.pk)]}
    text = admin_client.post(url("workflowrun_changelist"), body).content.decode()
    assert "can be retried" in text and "retryed" not in text
    assert WorkflowRun.objects.get(pk=failed.pk).status == "failed"


# --- the audit -----------------------------------------------------------------------------


def audit_rows(html: str) -> list[tuple[str, str]]:
    return re.findall(r'data-audit-what="([^"]*)" data-audit-who="([^"]*)"', html)


def test_the_audit_lists_console_and_api_operations_with_usernames(
        django_user_model, users, staff):
    from django.test import Client

    from tests.admin.test_console import staff_client

    console, operator = staff_client(
        django_user_model, "operator", "view_workflowrun", "start_workflowrun",
        "cancel_workflowrun", "resume_workflowrun", "approve_workflowrun")
    started = console.post(url("registeredworkflow_changelist"),
                           {"workflow": "held_until_resumed", "input": "{}"})
    assert started.status_code == 302
    run = WorkflowRun.objects.get(workflow="held_until_resumed")
    assert run.status == "suspended"
    # Through the API, as the staff user (a holder of the run permissions).
    resumed = staff.post(f"{API}runs/{run.pk}/resume/", {"data": {"dock": 4}}, format="json")
    assert resumed.status_code == 200, resumed.content
    gated = pw.start_workflow("needs_approval", {}, owner=users["owner"])
    answer = staff.post(f"{API}runs/{gated.pk}/approve/",
                        {"reason": "Manager sign-off", "decision": {"approved": True}},
                        format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "decided"
    other = pw.start_workflow("two_gates", {})
    console.post(url("workflowrun_cancel", other.pk), {"reason": "no courier"})
    cancelled_by_api = pw.start_workflow("two_gates", {})
    assert staff.post(f"{API}runs/{cancelled_by_api.pk}/cancel/",
                      {"reason": "duplicate"}, format="json").status_code == 200

    viewer = Client()
    viewer.force_login(operator)
    assert audit_rows(page_of(viewer, run)) == [
        ("started", "operator"), ("resumed", "staff")]
    html = page_of(viewer, run)
    assert "via</th>" in html and '{&quot;dock&quot;: 4}' in html
    assert audit_rows(page_of(viewer, gated)) == [("started", "owner"), ("approved", "staff")]
    assert audit_rows(page_of(viewer, other)) == [("started", ""), ("cancelled", "operator")]
    assert "no courier" in page_of(viewer, other)
    assert audit_rows(page_of(viewer, cancelled_by_api)) == [
        ("started", ""), ("cancelled", "staff")]
    assert "duplicate" in page_of(viewer, cancelled_by_api)
    # A start through the API: the run row says who (its owner) and how (its wire).
    answer = staff.post(f"{API}workflows/held_until_resumed/start/", {"data": {}},
                        format="json")
    by_api = WorkflowRun.objects.get(pk=answer.json()["id"])
    html = page_of(viewer, by_api)
    assert audit_rows(html) == [("started", "staff")]
    assert re.search(r"<td>started</td>\s*<td>API</td>", html)


def test_a_runs_audit_is_found_through_an_index_of_the_admin_log():
    from django.contrib.admin.models import LogEntry
    from django.db import connection

    from pikku_workflows.run_audit import ADMIN_LOG_INDEX

    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(
            cursor, LogEntry._meta.db_table)
    index = constraints[ADMIN_LOG_INDEX]
    assert index["index"] and index["columns"] == ["object_id", "content_type_id"]


def test_the_audit_shows_decisions_and_cancels_made_by_code(admin_client, users):
    gated = pw.start_workflow("needs_approval", {})
    pw.approve_step(gated.pk, "Manager sign-off", {"approved": False, "note": "too big"},
                    user=users["staff"])
    cancelled = pw.start_workflow("two_gates", {})
    pw.cancel_run(cancelled.pk, reason="customer left")
    assert audit_rows(page_of(admin_client, gated)) == [("started", ""), ("rejected", "staff")]
    assert "too big" in page_of(admin_client, gated)
    html = page_of(admin_client, cancelled)
    assert audit_rows(html) == [("started", ""), ("cancelled", "")]
    assert "customer left" in html


# --- the history download ------------------------------------------------------------------


def test_a_runs_history_downloads_as_json_in_the_apis_shapes(admin_client, staff,
                                                             django_user_model):
    import json

    from tests.admin.test_console import staff_client

    run = pw.start_workflow("retrying", {"fail_times": 1, "retries": 2})
    response = admin_client.get(url("workflowrun_download", run.pk))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == \
        f'attachment; filename="retrying-{run.pk}.json"'
    history = json.loads(b"".join(response.streaming_content))
    assert history["run"] == staff.get(f"{API}runs/{run.pk}/").json()
    assert history["steps"] == staff.get(f"{API}runs/{run.pk}/steps/").json()["results"]
    assert history["attempts"] == staff.get(f"{API}runs/{run.pk}/history/").json()["results"]
    assert [a["status"] for a in history["attempts"]] == ["failed", "succeeded"]
    assert f'href="{url("workflowrun_download", run.pk)}"' in page_of(admin_client, run)
    # The view permission gates it.
    refused, _ = staff_client(django_user_model, "nobody")
    assert refused.get(url("workflowrun_download", run.pk)).status_code in (302, 403)


def test_the_download_of_a_body_failure_keeps_the_traceback_out(admin_client):
    import json

    run = pw.start_workflow("fails_on_input", {})
    response = admin_client.get(url("workflowrun_download", run.pk))
    history = json.loads(b"".join(response.streaming_content))
    assert history["run"]["error"] == {"message": "'amount'", "code": "KeyError"}
    assert history["steps"] == [] and history["attempts"] == []


# --- the start form --------------------------------------------------------------------------


def start_form_input(html: str, workflow: str) -> str:
    import html as html_module

    section = html.split(f'id="workflow-{workflow}"', 1)[1].split("</section>", 1)[0]
    text = re.search(r'<textarea name="input"[^>]*>(.*?)</textarea>', section, re.S)
    assert text is not None
    return html_module.unescape(text.group(1))


def test_the_start_form_is_prefilled_from_the_input_serializer(admin_client):
    import json

    html = admin_client.get(url("registeredworkflow_changelist")).content.decode()
    example = json.loads(start_form_input(html, "takes_an_order"))
    assert example == {"order_id": 8, "quantity": 2, "skus": ["example"], "express": False,
                       "kind": "retail", "customer": {"name": "Ada",
                                                      "email": "user@example.com"}}
    # A workflow without a serializer: an empty object.
    assert start_form_input(html, "sequential") == "{}"
    # The example is one its serializer accepts: submitted as shown, the run starts.
    admin_client.post(url("registeredworkflow_changelist"),
                      {"workflow": "takes_an_order",
                       "input": start_form_input(html, "takes_an_order")})
    run = WorkflowRun.objects.get(workflow="takes_an_order")
    assert run.status == "completed" and run.output == {"order": 8, "for": "Ada"}


def test_worker_ttl_is_an_int_of_16_seconds_or_more(settings):
    from pikku_workflows.conf import pikku_settings
    from pikku_workflows.exceptions import WorkflowConfigurationError

    assert pikku_settings.WORKER_TTL == 30
    for wrong in (15, "30", True, 30.5):
        settings.PIKKU_WORKFLOWS = {"WORKER_TTL": wrong}
        with pytest.raises(WorkflowConfigurationError, match="WORKER_TTL"):
            pikku_settings.WORKER_TTL  # noqa: B018 - read to validate
    settings.PIKKU_WORKFLOWS = {"WORKER_TTL": 16}
    assert pikku_settings.WORKER_TTL == 16


def test_the_retry_list_action_skips_runs_that_failed_on_their_input(admin_client):
    on_input = pw.start_workflow("fails_on_input", {"order_id": 8})
    after_a_step = pw.start_workflow("fails_after_a_step", {})
    assert on_input.status == after_a_step.status == "failed"
    changelist = reverse("admin:pikku_workflows_workflowrun_changelist")
    selected = {"action": "retry_runs",
                "_selected_action": [str(on_input.pk), str(after_a_step.pk)]}
    preview = admin_client.post(changelist, selected).content.decode()
    assert "Retry 1 run?" in preview and "1 other in the selection will be skipped" in preview
    admin_client.post(changelist, {**selected, "confirm": "yes"})
    assert WorkflowRun.objects.get(pk=on_input.pk).updated_at == on_input.updated_at
    assert WorkflowRun.objects.get(pk=after_a_step.pk).updated_at > after_a_step.updated_at
