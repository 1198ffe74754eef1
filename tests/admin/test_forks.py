"""The console's reruns: "Rerun from here" on step rows and graph nodes, the confirmation
page (kept and rerun steps, a new input, a reason), the links between a run and its
forks, the bulk rerun from the first failed step, the admin log and the audit."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry

import pikku_workflows as pw
from pikku_workflows.admin import actions
from pikku_workflows.models import WorkflowRun
from tests.admin.test_console import staff_client, url
from tests.unit.workflows_forks import FLAGS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fork_flags")]


def failed_order():
    run = pw.start_workflow("fork_orders", {})
    assert run.status == "failed"
    return run


def test_each_step_and_graph_node_of_a_finished_run_offers_a_rerun(admin_client):
    source = failed_order()
    page = admin_client.get(url("workflowrun_change", source.pk)).content.decode()
    fork_url = url("workflowrun_fork", source.pk)
    for key in ("Reserve", "Price", "Charge"):
        assert f'href="{fork_url}?from_step={key}" class="pk-rerun"' in page
        assert f'data-rerun="{key}"' in page  # its graph node's link
    assert "pk-tool-fork" in page  # and the object tool: from the first failed step
    live = pw.start_workflow("two_gates", {})
    live_page = admin_client.get(url("workflowrun_change", live.pk)).content.decode()
    assert "pk-rerun" not in live_page and 'class="rerun"' not in live_page


def test_a_run_suspended_with_version_conflict_offers_a_rerun(admin_client):
    run = pw.start_workflow("fork_redeployed", {})
    waiting = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    assert "pk-tool-fork" not in waiting and "pk-rerun" not in waiting  # merely suspended
    FLAGS["renamed"] = True
    run = pw.resume_run(run.pk)
    assert run.error["code"] == "VERSION_CONFLICT"
    page = admin_client.get(url("workflowrun_change", run.pk)).content.decode()
    assert "pk-tool-fork" in page
    assert f'href="{url("workflowrun_fork", run.pk)}?from_step=Price" class="pk-rerun"' in page
    done = admin_client.post(url("workflowrun_fork", run.pk),
                             {"from_step": "Price", "input": "{}", "reason": "renamed"})
    fork = WorkflowRun.objects.get(forked_from=run)
    assert done.status_code == 302 and fork.status == "suspended"


def test_the_confirmation_lists_kept_and_rerun_steps_and_reruns(admin_client, admin_user):
    source = failed_order()
    FLAGS["fixed"] = True
    page = admin_client.get(url("workflowrun_fork", source.pk) + "?from_step=Price")
    text = page.content.decode()
    assert page.status_code == 200
    kept = re.search(r'<ul id="pk-fork-kept">(.*?)</ul>', text, re.S).group(1)
    rerun = re.search(r'<ul id="pk-fork-rerun">(.*?)</ul>', text, re.S).group(1)
    assert re.findall(r'data-step="([^"]+)"', kept) == ["Reserve"]
    assert re.findall(r'data-step="([^"]+)"', rerun) == ["Price", "Charge", "Charge:onError"]
    # The editor starts with the run's own input.
    assert re.search(r'<textarea name="input"[^>]*>\s*\{\}</textarea>', text)
    done = admin_client.post(url("workflowrun_fork", source.pk),
                             {"from_step": "Price", "input": "{}", "reason": "fixed #12"})
    fork = WorkflowRun.objects.get(forked_from=source)
    assert done.status_code == 302 and done["Location"] == url("workflowrun_change", fork.pk)
    assert (fork.status, fork.fork_step, fork.fork_reason, fork.forked_by_id) == (
        "completed", "Price", "fixed #12", admin_user.pk)
    assert fork.wire == {"type": "admin"}
    # Each links the other; the kept steps say where they come from.
    fork_page = admin_client.get(url("workflowrun_change", fork.pk)).content.decode()
    assert url("workflowrun_change", source.pk) in fork_page
    assert "Rerun of" in fork_page and "fixed #12" in fork_page
    assert fork_page.count('class="quiet pk-kept"') == 1
    source_page = admin_client.get(url("workflowrun_change", source.pk)).content.decode()
    assert f'data-fork="{fork.pk}"' in source_page
    # The admin log, and both audits.
    entry = LogEntry.objects.get()
    assert entry.object_id == str(source.pk) and str(fork.pk) in entry.change_message
    assert "rerun" in source_page.split('id="pk-audit"')[1]
    assert f"rerun of run {source.pk}" in fork_page.split('id="pk-audit"')[1]


def test_a_new_input_in_the_editor(admin_client):
    source = failed_order()
    admin_client.post(url("workflowrun_fork", source.pk), {"input": '{"ok": true}'})
    fork = WorkflowRun.objects.get(forked_from=source)
    assert (fork.input, fork.status) == ({"ok": True}, "completed")
    bad = admin_client.post(url("workflowrun_fork", source.pk), {"input": "{nope"})
    assert bad.status_code == 200 and "Not valid JSON" in bad.content.decode()
    assert WorkflowRun.objects.filter(forked_from=source).count() == 1


def test_a_refused_rerun_says_why_and_writes_nothing(admin_client):
    source = failed_order()
    FLAGS.update(fixed=True, renamed=True)
    before = WorkflowRun.objects.count()
    page = admin_client.post(url("workflowrun_fork", source.pk), {"input": "{}"}, follow=True)
    assert "Rerun refused" in page.content.decode()
    assert "Price v2" in page.content.decode()
    assert WorkflowRun.objects.count() == before and not LogEntry.objects.exists()
    unknown = admin_client.get(url("workflowrun_fork", source.pk) + "?from_step=Nope",
                               follow=True)
    assert "has no step" in unknown.content.decode()


def test_the_permission_gates_every_rerun(django_user_model):
    source = failed_order()
    viewer, _ = staff_client(django_user_model, "viewer", "view_workflowrun")
    page = viewer.get(url("workflowrun_change", source.pk)).content.decode()
    assert "pk-rerun" not in page and 'class="rerun"' not in page
    assert viewer.get(url("workflowrun_fork", source.pk)).status_code == 403
    assert viewer.post(url("workflowrun_fork", source.pk), {}).status_code == 403
    changelist = viewer.get(url("workflowrun_changelist")).content.decode()
    assert "fork_runs" not in changelist
    forker, _ = staff_client(django_user_model, "forker", "view_workflowrun",
                             "fork_workflowrun")
    assert 'value="fork_runs"' in forker.get(url("workflowrun_changelist")).content.decode()
    assert forker.post(url("workflowrun_fork", source.pk), {}).status_code == 302
    assert WorkflowRun.objects.filter(forked_from=source).count() == 1


def test_the_bulk_rerun_from_the_first_failed_step_in_batches(admin_client, monkeypatch):
    monkeypatch.setattr(actions, "BATCH_SIZE", 2)
    failed = [failed_order() for _ in range(3)]
    done = pw.start_workflow("sequential", {"x": 1})
    FLAGS["fixed"] = True
    changelist = url("workflowrun_changelist") + "?workflow=fork_orders"
    body = {"action": "fork_runs", "select_across": "1", "index": "0",
            "_selected_action": [str(failed[0].pk)]}
    confirm = admin_client.post(changelist, body).content.decode()
    assert "Rerun 3 runs from their first failed step?" in confirm
    page = admin_client.post(changelist, {**body, "confirm": "yes"}, follow=True)
    assert "3 run(s) rerun" in page.content.decode()
    for run in failed:
        fork = WorkflowRun.objects.get(forked_from=run)
        assert (fork.status, fork.fork_step) == ("completed", "Charge")
        assert WorkflowRun.objects.get(pk=run.pk).status == "failed"  # unchanged
    assert not WorkflowRun.objects.filter(forked_from=done).exists()
    assert LogEntry.objects.count() == 3


def test_a_graph_node_reruns_with_what_is_downstream(admin_client):
    source = pw.start_workflow("fork_graph", {"items": [1, 2]})
    assert source.status == "failed"
    page = admin_client.get(url("workflowrun_change", source.pk)).content.decode()
    assert 'data-rerun="mid"' in page and 'data-rerun="start"' in page
    preview = admin_client.get(url("workflowrun_fork", source.pk) + "?from_step=items%5B1%5D")
    text = preview.content.decode()
    assert "instance of a node" in text
    rerun = re.search(r'<ul id="pk-fork-rerun">(.*?)</ul>', text, re.S).group(1)
    assert re.findall(r'data-step="([^"]+)"', rerun) == ["items[0]", "items[1]", "mid"]


def test_the_confirmation_names_at_most_a_hundred_steps_of_each_kind(admin_client,
                                                                     monkeypatch):
    monkeypatch.setattr(actions, "FORK_PREVIEW_STEPS", 2)
    source = pw.start_workflow("fan_out", {"numbers": [1, 2, 3, 4, 5]})
    assert source.status == "completed"
    text = admin_client.get(url("workflowrun_fork", source.pk)).content.decode()
    rerun = re.search(r'<ul id="pk-fork-rerun">(.*?)</ul>', text, re.S).group(1)
    assert len(re.findall(r"data-step=", rerun)) == 2
    assert "Run again (5)" in text and "and 3 more" in text
