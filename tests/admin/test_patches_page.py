"""A DSL version's page lists, per patch of the deployed code, the live runs without it."""

from __future__ import annotations

import pytest
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowVersion
from pikku_workflows.registry import registry
from tests.unit.test_patches import old_code, patched_code

pytestmark = pytest.mark.django_db


def test_the_version_page_lists_per_patch_the_live_runs_without_it(admin_client):
    with registry.isolated():
        old_code()
        before = pw.start_workflow("shipping", {})
    with registry.isolated():
        patched_code()
        after = pw.start_workflow("shipping", {})
        version = WorkflowVersion.objects.filter(workflow="shipping").latest("created_at")
        page = admin_client.get(reverse("admin:pikku_workflows_workflowversion_change",
                                        args=[version.pk]))
        html = page.content.decode()
        assert page.status_code == 200
        assert 'data-patch="check-address" data-without="1"' in html
        assert f'data-patch-run="{before.pk}"' in html
        assert f'data-patch-run="{after.pk}"' not in html
        pw.cancel_run(before.pk)
        html = admin_client.get(reverse("admin:pikku_workflows_workflowversion_change",
                                        args=[version.pk])).content.decode()
        assert 'data-patch="check-address" data-without="0"' in html
        assert "none: the old branch can go" in html


def test_a_run_page_shows_its_patch_marker(admin_client):
    with registry.isolated():
        patched_code()
        run = pw.start_workflow("shipping", {})
    page = admin_client.get(reverse("admin:pikku_workflows_workflowrun_change",
                                    args=[run.pk]))
    assert page.status_code == 200
    assert "patch:check-address" in page.content.decode()
    api = pw.get_run_status(run.pk)
    assert [s["kind"] for s in api["steps"]][:2] == ["step", "patch"]
