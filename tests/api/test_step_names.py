"""Issue 22: every answer names a step by its presentable ``name`` (never an engine-internal
``__workflow_...`` key), with the user's own ``label`` and its ``kind``."""

from __future__ import annotations

import contextlib
import json

import pytest

import pikku_workflows as pw
from pikku_workflows.api import stream
from pikku_workflows.engine.summary import public_error, step_kind
from pikku_workflows.exceptions import WorkflowDefinitionError, WorkflowStepFailedError
from pikku_workflows.registry import registry
from pikku_workflows.status import StepKind
from pikku_workflows.step_keys import public_step_name, step_key, step_label
from pikku_workflows.testing import fake_clock
from tests.conftest import API

pytestmark = pytest.mark.django_db

#: (name, label, kind) of every step of ``every_kind``, in the order it records them.
EVERY_KIND = [
    ("Charge", "Charge", "step"),
    ("Charge#1", "Charge", "step"),
    ("Compose note", "Compose note", "closure"),
    ("Cool-off", "Cool-off", "sleep"),
    ("suspend:Awaiting warehouse", "Awaiting warehouse", "suspend"),
    ("approval:Manager sign-off", "Manager sign-off", "approval"),
    ("Run child", "Run child", "child"),
    ("Pay", "Pay", "step"),
    ("Pay:onError", "Pay", "compensation"),
]


@pytest.fixture
def every_kind():
    """A DSL workflow with one step of each kind the engine records."""
    with registry.isolated():
        @pw.workflow(name="every_kind")
        def every_kind(wf, data):
            wf.do("Charge", "echo", 1)
            wf.do("Charge", "echo", 2)
            wf.do("Compose note", lambda: "note")
            wf.sleep("Cool-off", "5min")
            dock = wf.suspend("Awaiting warehouse")
            wf.approval("Manager sign-off")
            wf.do("Run child", "child_ok", {"n": 2})
            with contextlib.suppress(WorkflowStepFailedError):
                wf.do("Pay", "always_fails", {"order": 1}, retries=0, on_error="refund")
            return {"dock": dock}

        yield "every_kind"


def get_json(client, url):
    response = client.get(url)
    assert response.status_code == 200, response.content
    return response.json()


def everything(client, run_id):
    """Every read answer of the run, by route: detail, and all of steps/history/timeline."""
    base = f"{API}runs/{run_id}/"
    return {"detail": get_json(client, base),
            **{part: get_json(client, f"{base}{part}/?page_size=500")["results"]
               for part in ("steps", "history", "timeline")}}


def assert_no_engine_keys(*answers):
    for answer in answers:
        text = json.dumps(answer)
        assert "__workflow_" not in text, text


def triples(rows, name_key="name"):
    return [(row[name_key], row["label"], row["kind"]) for row in rows]


def test_every_kind_of_step_is_named_labelled_and_kinded_on_every_route(owner, users,
                                                                       every_kind):
    with fake_clock():
        run = pw.start_workflow(every_kind, {}, owner=users["owner"])
        seen = [everything(owner, run.pk)]
        detail = seen[0]["detail"]
        assert detail["status"] == "suspended"
        assert detail["error"]["step"] == "suspend:Awaiting warehouse"
        assert detail == pw.get_run_status(run.pk)

        pw.resume_run(run.pk, 4)
        seen.append(everything(owner, run.pk))
        detail = seen[-1]["detail"]
        assert detail["error"]["step"] == "approval:Manager sign-off"
        inbox = get_json(owner, f"{API}approvals/")["results"]
        assert [gate["step"] for gate in inbox] == ["approval:Manager sign-off"]

        # approve/ takes the gate's label (its reason) and answers its name.
        answer = owner.post(f"{API}runs/{run.pk}/approve/",
                            {"reason": "Manager sign-off", "decision": {"ok": True}},
                            format="json")
        assert answer.status_code == 200, answer.content
        assert answer.json()["step"] == "approval:Manager sign-off"
        assert answer.json()["status"] == "decided"
        seen.append(everything(owner, run.pk))

    final = seen[-1]
    assert final["detail"]["status"] == "completed"
    assert final["detail"] == pw.get_run_status(run.pk)
    assert triples(final["steps"]) == EVERY_KIND
    assert triples(final["detail"]["steps"]) == EVERY_KIND
    assert final["steps"][6]["child_run"] is not None
    kinds = {name: (label, kind) for name, label, kind in EVERY_KIND}
    # from_step_name is a name too: the step after the approval gate names it.
    after_gate = next(step for step in final["steps"] if step["name"] == "Run child")
    assert after_gate["from_step_name"] == "approval:Manager sign-off"
    # History and timeline name their steps alike (the steps that have attempts).
    for part in ("history", "timeline"):
        rows = final[part]
        assert rows and all(kinds[row["step"]] == (row["label"], row["kind"])
                            for row in rows), rows
        assert {row["kind"] for row in rows} >= {"step", "closure", "child", "compensation"}
    assert_no_engine_keys(*seen, inbox, answer.json())


def test_the_stream_sends_presentable_names(owner, users, every_kind, monkeypatch):
    monkeypatch.setattr(stream, "POLL_SECONDS", 0)
    monkeypatch.setattr(stream, "LIFETIME_SECONDS", 0)
    with fake_clock():
        run = pw.start_workflow(every_kind, {}, owner=users["owner"])
    response = owner.get(f"{API}runs/{run.pk}/stream/")
    text = b"".join(response.streaming_content).decode()
    assert "suspend:Awaiting warehouse" in text and "__workflow_" not in text


def test_a_run_cancelled_at_its_gate(owner, users):
    """Cancelling a run at a gate: the gate's step error and the run's error stay clean."""
    run = pw.start_workflow("needs_approval", {}, owner=users["owner"])
    assert owner.post(f"{API}runs/{run.pk}/cancel/", {}, format="json").status_code == 200
    answers = everything(owner, run.pk)
    gate = next(s for s in answers["steps"] if s["kind"] == "approval")
    assert (gate["name"], gate["label"]) == ("approval:Manager sign-off", "Manager sign-off")
    assert_no_engine_keys(answers)


def test_graph_instances_are_labelled_by_their_node(owner, users):
    fanned = pw.start_workflow("queued_graph", {"values": [1, 2, 3]}, inline=True,
                               owner=users["owner"])
    looped = pw.start_workflow("loops", {"times": 2}, inline=True, owner=users["owner"])
    fan = everything(owner, fanned.pk)
    assert fan["detail"]["status"] == "completed", fan["detail"]
    assert triples(fan["steps"]) == [
        ("numbers", "numbers", "step"), ("square[0]", "square", "step"),
        ("square[1]", "square", "step"), ("square[2]", "square", "step"),
        ("sum", "sum", "step")]
    assert triples(fan["detail"]["steps"]) == triples(fan["steps"])
    assert {(e["step"], e["label"], e["kind"]) for e in fan["history"]} == set(
        triples(fan["steps"]))
    assert {(e["step"], e["label"], e["kind"]) for e in fan["timeline"]} == set(
        triples(fan["steps"]))
    loop = everything(owner, looped.pk)
    assert ("visit#1", "visit", "step") in triples(loop["steps"])
    assert_no_engine_keys(fan, loop)


def test_a_step_of_a_registered_workflow_is_a_child_even_before_its_child_run():
    assert step_kind("Run child", rpc_name="child_ok", child_run=None, data={}) == "child"
    assert step_kind("Add", rpc_name="add", child_run=None, data=None) == "step"
    assert step_kind("x", rpc_name=None, child_run=None, data=None) == StepKind.CLOSURE
    assert step_kind("x", rpc_name=None, child_run=None, data={"duration": 0}) == "sleep"
    # Graph runs have no gates or compensations: a node is a step (or a child run).
    assert step_kind("x:onError", rpc_name="echo", child_run=None, data=None,
                     graph=True) == "step"


@pytest.mark.parametrize(("key", "graph", "name", "label"), [
    ("Charge", False, "Charge", "Charge"),
    ("Charge#12", False, "Charge#12", "Charge"),
    ("Charge#1:onError", False, "Charge#1:onError", "Charge"),
    ("__workflow_approval:Sign-off#1", False, "approval:Sign-off#1", "Sign-off"),
    ("__workflow_suspend:Wait", False, "suspend:Wait", "Wait"),
    ("Item[2]", False, "Item[2]", "Item[2]"),  # a DSL name, not a graph instance
    ("node[2]", True, "node[2]", "node"),
    ("node#3[2]", True, "node#3[2]", "node"),
])
def test_names_and_labels_of_keys_and_names_lead_back_to_keys(key, graph, name, label):
    assert public_step_name(key) == name
    assert step_label(key, graph=graph) == label
    assert step_key(name) == key


def test_the_public_error_names_its_step():
    error = {"code": "WAITING_FOR_APPROVAL", "message": "m", "traceback": "...",
             "step": "__workflow_approval:Sign-off"}
    assert public_error(error) == {"code": "WAITING_FOR_APPROVAL", "message": "m",
                                   "step": "approval:Sign-off"}


@pytest.mark.parametrize("name", ["approval:x", "suspend:Wait"])
def test_names_that_would_read_as_gates_are_refused(name):
    with registry.isolated():
        @pw.workflow(name="reads_as_gate")
        def reads_as_gate(wf, data):
            return wf.do(name, lambda: 1)

        run = pw.start_workflow("reads_as_gate", {})
        run.refresh_from_db()
        assert run.status == "failed" and run.error["code"] == "DEFINITION_ERROR"
        assert "is reserved" in run.error["message"]
        with pytest.raises(WorkflowDefinitionError, match="reserved for gates"):
            pw.graph_workflow("graph_reads_as_gate", nodes={name: "echo"})
        with pytest.raises(WorkflowDefinitionError, match="reserved for gates"):
            pw.graph_workflow("graph_engine_key", nodes={"__workflow_x": "echo"})


def test_a_workflows_graph_and_planned_steps_name_gates_as_runs_do(owner):
    detail = owner.get(f"{API}workflows/two_gates/")
    assert detail.status_code == 200
    assert "__workflow_" not in detail.content.decode()
    body = detail.json()
    ids = {node["id"] for node in body["graph"]["nodes"]}
    assert {"suspend:Awaiting warehouse", "suspend:Awaiting courier"} <= ids
    assert all(edge["source"] in ids and edge["target"] in ids
               for edge in body["graph"]["edges"])
    assert [step["step_name"] for step in body["planned_steps"]] == [
        "suspend:Awaiting warehouse", "Between", "suspend:Awaiting courier"]
