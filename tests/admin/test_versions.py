"""A workflow version's page: its graph drawn, a comparison with another version (steps
added, removed, changed; edges), its runs paged without a count; the runs list filtered
by version."""

from __future__ import annotations

import copy
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.admin.version_diff import compare
from pikku_workflows.models import WorkflowRun, WorkflowVersion

pytestmark = pytest.mark.django_db


def versions():
    """``branching``'s recorded version, and a newer one: "Full price" removed, "Bulk
    discount" calling another function, "Audit" added after it."""
    pw.start_workflow("branching", {"amount": 5}, inline=True)
    old = WorkflowVersion.objects.get(workflow="branching")
    graph = copy.deepcopy(old.graph)
    graph["nodes"] = [n for n in graph["nodes"] if n["id"] != "Full price"]
    for node in graph["nodes"]:
        if node["id"] == "Bulk discount":
            node["rpc_name"] = "double"
    graph["nodes"].append({"id": "Audit", "kind": "step", "label": "Audit",
                           "step_name": "Audit", "rpc_name": "echo"})
    graph["edges"] = [e for e in graph["edges"] if "Full price" not in (e["source"],
                                                                        e["target"])]
    graph["edges"] = [e for e in graph["edges"] if e["source"] != "Bulk discount"]
    graph["edges"] += [{"source": "Bulk discount", "target": "Audit", "label": None,
                        "kind": "next"},
                       {"source": "Audit", "target": "return_1", "label": None,
                        "kind": "next"}]
    new = WorkflowVersion.objects.create(workflow="branching", graph_hash="feedc0ffee12",
                                         graph=graph, source=old.source)
    WorkflowVersion.objects.filter(pk=new.pk).update(created_at=old.created_at
                                                     + timedelta(hours=1))
    new.refresh_from_db()
    return old, new


def test_compare_names_steps_added_removed_changed_and_edges():
    old, new = versions()
    diff = compare(old.graph, new.graph)
    assert [n["step_name"] for n in diff.added] == ["Audit"]
    assert [n["step_name"] for n in diff.removed] == ["Full price"]
    assert [(c.key, c.fields) for c in diff.changed] == [
        ("Bulk discount", {"rpc_name": ("echo", "double")})]
    assert ("Bulk discount", "Audit", "next") in diff.edges_added
    assert ("branch_1", "Full price", "else") in diff.edges_removed
    assert compare(old.graph, copy.deepcopy(old.graph)).same


def page(client, version, query=""):
    return client.get(reverse("admin:pikku_workflows_workflowversion_change",
                              args=[version.pk]) + query)


def test_a_versions_page_draws_its_graph_and_compares(admin_client):
    old, new = versions()
    body = page(admin_client, new).content.decode()
    nodes = set(re.findall(r'data-node="([^"]+)"', body))
    assert {"Audit", "Bulk discount"} <= nodes and "Full price" not in nodes
    compared = page(admin_client, new, f"?compare={old.pk}").content.decode()
    rows = re.findall(r'data-change="([\w-]+)" data-step="([^"]+)"', compared)
    assert sorted(rows) == [("added", "Audit"), ("changed", "Bulk discount"),
                            ("removed", "Full price")]
    assert "rpc_name: <del>echo</del> → <ins>double</ins>" in compared
    # Either way round, the older version is the "from".
    assert re.findall(r'data-change="([\w-]+)" data-step="([^"]+)"',
                      page(admin_client, old, f"?compare={new.pk}").content.decode()) \
        == re.findall(r'data-change="([\w-]+)" data-step="([^"]+)"', compared)
    # A version of another workflow, or junk, is no comparison.
    assert "pk-diff" not in page(admin_client, new, "?compare=999999").content.decode()
    assert page(admin_client, new, "?compare=x").status_code == 200
    assert page(admin_client, new, "?x").status_code == 200
    assert admin_client.get(reverse("admin:pikku_workflows_workflowversion_change",
                                    args=["nope"])).status_code == 404


def test_a_versions_page_lists_its_runs_paged_without_a_count(admin_client):
    old, new = versions()
    WorkflowRun.objects.bulk_create([WorkflowRun(workflow="branching",
                                                 graph_hash=new.graph_hash,
                                                 status="completed") for _ in range(25)])

    def listed(body):
        return re.findall(r'<tr data-run="([^"]+)">', body)

    first = page(admin_client, new).content.decode()
    assert len(listed(first)) == 20 and "?runs=2" in first
    second = page(admin_client, new, "?runs=2").content.decode()
    assert len(listed(second)) == 5 and not set(listed(first)) & set(listed(second))
    assert len(listed(page(admin_client, old).content.decode())) == 1
    runs_list = re.search(r'href="([^"]+)" id="pk-version-runs-list"', first).group(1)
    body = admin_client.get(runs_list.replace("&amp;", "&")).content.decode()
    ids = {str(r.pk)[:8] for r in WorkflowRun.objects.filter(graph_hash=new.graph_hash)}
    assert sum(short in body for short in ids) == 25
    old_run = WorkflowRun.objects.get(graph_hash=old.graph_hash)
    assert str(old_run.pk)[:8] not in body

    def count(query=""):
        with CaptureQueriesContext(connection) as captured:
            page(admin_client, new, query)
        return len(captured)

    few = count(f"?compare={old.pk}")
    WorkflowRun.objects.bulk_create([WorkflowRun(workflow="branching",
                                                 graph_hash=new.graph_hash) for _ in range(50)])
    assert count(f"?compare={old.pk}") == few


def test_permissions(django_user_model):
    _old, new = versions()
    user = django_user_model.objects.create_user("v", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert page(client, new).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_workflowversion"))
    body = page(client, new).content.decode()
    assert "data-node=" in body and "pk-version-runs" not in body
