"""Events, messages and timeouts (DESIGN section 8.2): the engine, on the inline executor
unless a test says otherwise (the rq executor's are in test_events_rq.py)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command

import pikku_workflows as pw
from pikku_workflows.engine.clock import clock
from pikku_workflows.models import (
    WorkflowEvent,
    WorkflowMessage,
    WorkflowRun,
    WorkflowStep,
    WorkflowWait,
)
from pikku_workflows.runtime.recovery import Sweeper
from pikku_workflows.testing import fake_clock, run_scheduler

pytestmark = pytest.mark.django_db


def reload(run):
    return WorkflowRun.objects.get(pk=run.pk)


def start(name, data):
    return reload(pw.start_workflow(name, data))


# --- waiting and waking ---------------------------------------------------------------


def test_a_run_waits_suspended_and_the_event_wakes_it_inline():
    run = start("ev_wait", {"order": "order-8"})
    assert run.status == "suspended"
    assert run.error == {
        "code": "WAITING_FOR_EVENT", "step": "Paid",
        "message": "waiting for event 'payment.succeeded' (key 'order-8')",
        "event": "payment.succeeded", "key": "order-8", "timeout_at": None}
    assert run.lease_owner == ""  # it holds nothing while it waits
    result = pw.send_event("payment.succeeded", {"amount": 5}, key="order-8")
    assert (result.woken, result.created) == (1, True)
    run = reload(run)  # the send continued the inline run in this process
    assert (run.status, run.output) == ("completed", {"amount": 5})
    wait = WorkflowWait.objects.get(run=run)
    assert (wait.outcome, wait.event_id, wait.kind, wait.name, wait.key) == (
        "received", result.id, "event", "payment.succeeded", "order-8")
    assert wait.ended_at is not None


def test_the_error_names_the_timeout_and_the_step_kind_is_event():
    with fake_clock():
        run = start("ev_wait", {"order": "o-1", "timeout": "1h"})
        due = clock().now() + timedelta(hours=1)
    assert run.error["timeout_at"] == due.isoformat()
    assert run.error["message"] == (
        f"waiting for event 'payment.succeeded' (key 'o-1') until {due.isoformat()}")
    steps = pw.get_run_status(run.pk)["steps"]
    assert [(s["name"], s["kind"], s["status"]) for s in steps] == [
        ("Paid", "event", "suspended")]


def test_an_event_with_another_key_or_name_does_not_wake_the_run():
    run = start("ev_wait", {"order": "order-8"})
    assert pw.send_event("payment.succeeded", 1, key="order-9").woken == 0
    assert pw.send_event("payment.failed", 1, key="order-8").woken == 0
    assert pw.send_event("payment.succeeded", 1).woken == 0  # no key: only unkeyed waits
    assert reload(run).status == "suspended"


def test_key_none_matches_only_events_sent_without_a_key():
    run = start("ev_wait", {})
    assert pw.send_event("payment.succeeded", "keyed", key="k").woken == 0
    assert reload(run).status == "suspended"
    assert pw.send_event("payment.succeeded", "plain").woken == 1
    assert reload(run).output == "plain"


def test_an_event_stored_before_the_run_was_created_is_not_received():
    pw.send_event("payment.succeeded", "too early", key="o-2")
    run = start("ev_wait", {"order": "o-2"})
    assert run.status == "suspended"
    pw.send_event("payment.succeeded", "in time", key="o-2")
    assert reload(run).output == "in time"


def test_an_event_sent_between_the_runs_creation_and_its_wait_is_received():
    """The regression test of inngest/inngest#1433: in exactly that order. The run's own
    first step sends the event, after the run was created and before it waits."""
    run = start("ev_send_then_wait", {"order": "o-3"})
    assert (run.status, run.output) == ("completed", {"paid": "o-3"})
    assert WorkflowEvent.objects.filter(key="o-3").count() == 1


def test_an_event_sent_while_a_delayed_run_has_not_started_is_received():
    with fake_clock() as fake:
        run = pw.start_workflow("ev_wait", {"order": "o-4"}, delay="1h")
        assert reload(run).status == "scheduled"
        assert pw.send_event("payment.succeeded", "early bird", key="o-4").woken == 0
        fake.advance("1h")
    run = reload(run)
    assert (run.status, run.output) == ("completed", "early bird")


def test_two_runs_waiting_on_the_same_event_both_receive_it():
    first, second = start("ev_wait", {"order": "same"}), start("ev_wait", {"order": "same"})
    result = pw.send_event("payment.succeeded", "both", key="same")
    assert result.woken == 2
    assert [reload(r).output for r in (first, second)] == ["both", "both"]
    assert set(WorkflowWait.objects.filter(event_id=result.id).values_list(
        "run_id", flat=True)) == {first.pk, second.pk}
    assert WorkflowEvent.objects.get(pk=result.id).consumptions.count() == 2


def test_a_run_waiting_twice_consumes_two_different_events_in_order():
    run = start("ev_wait_twice", {"key": "k"})
    one = pw.send_event("tick", 1, key="k")
    run = reload(run)
    assert run.status == "suspended" and run.error["step"] == "Second"
    two = pw.send_event("tick", 2, key="k")
    assert reload(run).output == [1, 2]
    assert list(WorkflowWait.objects.filter(run=run).order_by("id").values_list(
        "step", "event_id")) == [("First", one.id), ("Second", two.id)]


def test_events_stored_before_the_waits_are_consumed_oldest_first():
    with fake_clock() as fake:
        run = pw.start_workflow("ev_wait_twice", {"key": "k"}, delay="1m")
        pw.send_event("tick", "a", key="k")
        pw.send_event("tick", "b", key="k")
        pw.send_event("tick", "c", key="k")
        fake.advance("1m")
    assert reload(run).output == ["a", "b"]


def test_replay_returns_the_recorded_value_never_a_newer_event():
    run = start("ev_wait_twice", {"key": "r"})
    pw.send_event("tick", "first", key="r")
    pw.send_event("tick", "newer", key="r")  # the second wait takes it; the first keeps its own
    run = reload(run)
    assert run.output == ["first", "newer"]
    first = WorkflowStep.objects.get(run=run, step_name="First")
    assert first.result == "first"


# --- timeouts ---------------------------------------------------------------------------


def test_the_fake_clock_ends_a_wait_at_its_timeout_with_none():
    with fake_clock() as fake:
        run = start("ev_wait", {"order": "late", "timeout": "1h"})
        fake.advance("59m")
        assert reload(run).status == "suspended"
        fake.advance("1m")
    run = reload(run)
    assert (run.status, run.output) == ("completed", None)
    assert WorkflowWait.objects.get(run=run).outcome == "timed_out"
    # A late event is not received by it any more.
    assert pw.send_event("payment.succeeded", 1, key="late").woken == 0


def test_run_scheduler_ends_due_waits():
    with fake_clock() as fake:
        run = start("ev_recv", {"timeout": 30})
        fake._now += timedelta(seconds=31)  # the time passes without advance()
        assert reload(run).status == "suspended"
        run_scheduler()
    assert reload(run).output == [None]


def test_an_event_stored_before_the_timeout_was_processed_wins():
    with fake_clock() as fake:
        run = start("ev_wait", {"order": "race", "timeout": 10})
        fake._now += timedelta(seconds=11)
        # The event arrives after the deadline, before any time keeper ended the wait.
        pw.send_event("payment.succeeded", "just in", key="race")
    assert reload(run).output == "just in"


def test_recovery_sweep_ends_a_due_wait():
    with fake_clock() as fake:
        run = start("ev_wait", {"order": "sweep", "timeout": 5})
        fake._now += timedelta(seconds=10)
        Sweeper().sweep()
    assert reload(run).output is None


def test_suspend_with_a_timeout_returns_the_resume_data_or_none():
    with fake_clock() as fake:
        resumed = start("ev_suspend_timeout", {"timeout": "1d"})
        assert resumed.error["code"] == "WORKFLOW_SUSPENDED"
        assert resumed.error["timeout_at"] == (clock().now() + timedelta(days=1)).isoformat()
        pw.resume_run(resumed.pk, "yes")
        timed_out = start("ev_suspend_timeout", {"timeout": "1d"})
        fake.advance("1d")
    assert reload(resumed).output == {"answer": "yes"}
    assert reload(timed_out).output == {"answer": None}
    assert WorkflowWait.objects.get(run=resumed).outcome == "received"
    assert WorkflowWait.objects.get(run=timed_out).outcome == "timed_out"


def test_suspend_without_a_timeout_keeps_its_error_and_writes_no_wait():
    run = start("ev_suspend_timeout", {})
    assert run.error == {"code": "WORKFLOW_SUSPENDED", "message": "Confirm",
                         "step": "__workflow_suspend:Confirm"}
    assert not WorkflowWait.objects.filter(run=run).exists()


def test_a_bad_timeout_fails_the_run_with_a_clear_error():
    run = start("ev_wait", {"order": "x", "timeout": "soon"})
    assert run.status == "failed"
    assert "the timeout of wait_for_event 'Paid'" in run.error["message"]


# --- messages -----------------------------------------------------------------------------


def test_messages_are_first_in_first_out_per_topic():
    run = start("ev_two_topics", {})
    assert run.error["code"] == "WAITING_FOR_MESSAGE"
    assert run.error["message"] == "waiting for a message on 'a'"
    assert run.error["topic"] == "a"
    pw.send(run.pk, "b1", topic="b")  # queued for later
    assert pw.send(run.pk, "a1", topic="a").woken == 1
    run = reload(run)
    assert run.error["step"] == "A#1"  # B was there already; the second A waits
    pw.send(run.pk, "a2", topic="a")
    assert reload(run).output == {"a": "a1", "b": "b1", "a2": "a2"}
    assert list(WorkflowMessage.objects.filter(run=run).order_by("id").values_list(
        "data", "received_by")) == [("b1", "B"), ("a1", "A"), ("a2", "A#1")]


def test_messages_sent_before_the_recv_wait_in_order():
    with fake_clock() as fake:
        run = pw.start_workflow("ev_recv", {"count": 3}, delay="1m")
        for n in (1, 2, 3, 4):
            pw.send(run.pk, n)
        fake.advance("1m")
    assert reload(run).output == [1, 2, 3]
    unreceived = WorkflowMessage.objects.filter(run=run, received_at__isnull=True)
    assert list(unreceived.values_list("data", flat=True)) == [4]


def test_the_step_kind_of_a_recv_is_message():
    run = start("ev_recv", {})
    assert [s["kind"] for s in pw.get_run_status(run.pk)["steps"]] == ["message"]


def test_a_message_to_a_finished_run_is_refused():
    run = start("ev_recv", {})
    pw.send(run.pk, "done")
    assert reload(run).status == "completed"
    with pytest.raises(pw.WorkflowRunStateError) as caught:
        pw.send(run.pk, "late")
    assert caught.value.http_status == 409
    assert "completed: it receives no more messages" in str(caught.value)
    assert WorkflowMessage.objects.filter(run=run).count() == 1


def test_a_message_to_an_unknown_run_is_404():
    with pytest.raises(pw.WorkflowRunNotFoundError):
        pw.send("6f1c4a3e-0000-4000-8000-000000000000", 1)
    assert not WorkflowMessage.objects.exists()


# --- idempotency and limits -----------------------------------------------------------------


def test_the_same_event_idempotency_key_stores_and_delivers_once():
    run = start("ev_wait_twice", {"key": "i"})
    first = pw.send_event("tick", {"n": 1}, key="i", idempotency_key="once")
    again = pw.send_event("tick", {"n": 1}, key="i", idempotency_key="once")
    assert (first.created, again.created, again.id, again.woken) == (True, False, first.id, 0)
    assert WorkflowEvent.objects.count() == 1
    assert reload(run).error["step"] == "Second"  # it was not delivered twice


@pytest.mark.parametrize("other", [
    {"event": "tock", "data": {"n": 1}, "key": "i"},
    {"event": "tick", "data": {"n": 2}, "key": "i"},
    {"event": "tick", "data": {"n": 1}, "key": "j"},
    {"event": "tick", "data": {"n": 1}, "key": None},
])
def test_the_same_event_idempotency_key_with_other_content_is_a_conflict(other):
    pw.send_event("tick", {"n": 1}, key="i", idempotency_key="once")
    with pytest.raises(pw.WorkflowIdempotencyError) as caught:
        pw.send_event(other["event"], other["data"], key=other["key"], idempotency_key="once")
    assert (caught.value.code, caught.value.http_status) == ("IDEMPOTENCY_CONFLICT", 409)
    assert "'once' was already used for event" in str(caught.value)
    assert WorkflowEvent.objects.count() == 1


def test_message_idempotency_is_per_run_and_checks_the_content():
    run = start("ev_recv", {"count": 3})
    other = start("ev_recv", {"count": 3})
    first = pw.send(run.pk, "x", idempotency_key="m")
    again = pw.send(run.pk, "x", idempotency_key="m")
    assert (again.id, again.created) == (first.id, False)
    assert pw.send(other.pk, "x", idempotency_key="m").created  # another run's scope
    with pytest.raises(pw.WorkflowIdempotencyError):
        pw.send(run.pk, "y", idempotency_key="m")
    with pytest.raises(pw.WorkflowIdempotencyError):
        pw.send(run.pk, "x", topic="other", idempotency_key="m")
    assert WorkflowMessage.objects.filter(run=run).count() == 1
    assert reload(run).output is None and reload(run).status == "suspended"


def test_a_message_replayed_by_its_key_after_the_run_finished_is_not_refused():
    run = start("ev_recv", {})
    first = pw.send(run.pk, "x", idempotency_key="k")
    assert reload(run).status == "completed"
    assert pw.send(run.pk, "x", idempotency_key="k") == pw.SendResult(first.id, 0, False)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: pw.send_event(""), "event must be a non-empty string"),
    (lambda: pw.send_event(None), "event must be a non-empty string"),  # type: ignore[arg-type]
    (lambda: pw.send_event("e" * 256), "event is 256 characters long; the limit is 255"),
    (lambda: pw.send_event("e", key="k" * 256), "key is 256 characters long"),
    (lambda: pw.send_event("e", key=""), "key must be a non-empty string"),
    (lambda: pw.send_event("e", key=5), "key must be a non-empty string"),  # type: ignore[arg-type]
    (lambda: pw.send_event("e", idempotency_key="i" * 256), "idempotency_key is 256"),
    (lambda: pw.send_event("e\x00"), "control characters"),
    (lambda: pw.send_event("e", {1, 2}), "data"),
    (lambda: pw.send_event("e", "x" * 300), "the limit (MAX_INPUT_BYTES) is 256"),
])
def test_bad_events_are_refused_before_anything_is_written(settings, call, message):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "MAX_INPUT_BYTES": 256}
    with pytest.raises(pw.WorkflowInputError) as caught:
        call()
    assert message in str(caught.value)
    assert caught.value.http_status == 400
    assert not WorkflowEvent.objects.exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"topic": ""}, "topic must be a non-empty string"),
    ({"topic": "t" * 256}, "topic is 256 characters long"),
    ({"idempotency_key": "i" * 256}, "idempotency_key is 256"),
    ({"data": object()}, "data"),
])
def test_bad_messages_are_refused_before_anything_is_written(kwargs, message):
    run = start("ev_recv", {})
    with pytest.raises(pw.WorkflowInputError) as caught:
        pw.send(run.pk, **kwargs)
    assert message in str(caught.value)
    assert not WorkflowMessage.objects.exists()


def test_a_bad_event_name_in_the_code_fails_the_run_clearly():
    run = start("ev_bad_wait", {"event": "x" * 300})
    assert run.status == "failed"
    assert "wait_for_event 'Bad': the event is 300 characters long" in run.error["message"]


# --- cancel, resume, recovery, state --------------------------------------------------------


def test_cancel_ends_the_open_wait():
    run = start("ev_wait", {"order": "c"})
    pw.cancel_run(run.pk)
    wait = WorkflowWait.objects.get(run=run)
    assert (wait.outcome, wait.ended_at is not None) == ("cancelled", True)
    assert pw.send_event("payment.succeeded", 1, key="c").woken == 0
    assert reload(run).status == "cancelled"


@pytest.mark.parametrize(("workflow", "code"), [
    ("ev_wait", "WAITING_FOR_EVENT"), ("ev_recv", "WAITING_FOR_MESSAGE")])
def test_resume_of_a_run_waiting_for_an_event_or_message_is_409(workflow, code):
    run = start(workflow, {"order": "r"})
    with pytest.raises(pw.WorkflowRunStateError) as caught:
        pw.resume_run(run.pk, "data")
    assert (caught.value.code, caught.value.http_status) == (code, 409)
    run = reload(run)
    assert run.status == "suspended" and run.error["code"] == code


@pytest.mark.parametrize("kind", ["event", "message"])
def test_the_recovery_sweep_redrives_a_lost_wake_up(kind):
    """The sender died after its commit, before the wake-up: only the rows know."""
    if kind == "event":
        run = start("ev_wait", {"order": "lost"})
        WorkflowEvent.objects.create(event="payment.succeeded", key="lost", data="found")
    else:
        run = start("ev_recv", {})
        WorkflowMessage.objects.create(run=run, data="found")
    assert reload(run).status == "suspended"
    counts = Sweeper().sweep()
    assert counts["due"] == 1
    assert reload(run).output == ("found" if kind == "event" else ["found"])


def test_the_sweep_leaves_a_wait_with_nothing_for_it_alone():
    run = start("ev_wait", {"order": "nothing"})
    pw.send_event("payment.succeeded", 1, key="other")
    assert Sweeper().sweep()["due"] == 0
    assert reload(run).status == "suspended"


def test_get_run_state_returns_what_the_run_published():
    run = start("ev_wait", {"order": "s"})
    WorkflowRun.objects.filter(pk=run.pk).update(
        state={"progress": 3, "__workflow_approval:x": {"decision": 1}})
    assert pw.get_run_status(run.pk)["status"] == "suspended"
    from pikku_workflows.operations import get_run_state
    assert get_run_state(run.pk) == {"progress": 3}


# --- graph workflows ---------------------------------------------------------------------


def test_a_graph_node_waits_for_an_event_keyed_by_a_ref():
    run = start("ev_graph", {"order": 42})
    assert run.status == "suspended"
    assert run.error["code"] == "WAITING_FOR_EVENT"
    assert (run.error["step"], run.error["key"]) == ("Paid", "42")
    assert pw.send_event("payment.succeeded", {"ok": True}, key="42").woken == 1
    run = reload(run)
    assert (run.status, run.output) == ("completed", {"paid": {"ok": True}})
    assert [s["kind"] for s in pw.get_run_status(run.pk)["steps"]] == ["event", "step"]


def test_a_graph_wait_times_out_with_none():
    with fake_clock() as fake:
        run = start("ev_graph", {"order": "g"})
        fake.advance("1h")
    assert reload(run).output == {"paid": None}


def test_the_graph_drawing_shows_the_wait():
    from pikku_workflows.registry import registry
    drawing = registry.workflow("ev_graph").drawing()
    node = next(n for n in drawing["nodes"] if n["id"] == "Paid")
    assert (node["kind"], node["event"], node["timeout"]) == ("event", "payment.succeeded",
                                                              3600.0)
    assert node["key"] == {"$ref": "trigger", "path": "order"}


@pytest.mark.parametrize(("nodes", "config", "message"), [
    ({"w": None}, {"w": {"wait_for_event": {"key": "k"}}},
     "wait_for_event's event must be a non-empty string"),
    ({"w": None}, {"w": {"wait_for_event": {"event": "e", "timeout": "later"}}},
     "wait_for_event's timeout"),
    ({"w": None}, {"w": {"wait_for_event": {"event": "e", "when": 1}}},
     "unknown key(s) ['when']"),
    ({"w": None}, {"w": {"wait_for_event": "e"}}, "wait_for_event must be a dict"),
    ({"w": "ev_note"}, {"w": {"wait_for_event": {"event": "e"}}},
     "calls no function: declare it as None"),
    ({"w": None}, {"w": {"wait_for_event": {"event": "e"}, "retries": 2}},
     "retries cannot be used with wait_for_event"),
    ({"w": None}, {"w": {"wait_for_event": {"event": "e", "key": pw.ref("nope")}}},
     "wait_for_event's key names unknown node 'nope'"),
    ({"w": None}, {"w": {"wait_for_event": {"event": "e", "key": 7}}},
     "a string, a ref(...) or None"),
    ({"w": None}, {}, "node 'w' must name a function"),
])
def test_bad_wait_for_event_configs_are_refused_at_declaration(nodes, config, message):
    from pikku_workflows.graph.definition import build_graph
    with pytest.raises(pw.WorkflowDefinitionError) as caught:
        build_graph("bad_wait", nodes, config)
    assert message in str(caught.value)


def test_the_static_analysis_knows_waits():
    from pikku_workflows.registry import registry
    nodes = registry.workflow("ev_wait_twice").analysis.graph["nodes"]
    waits = [(n["kind"], n["step_name"], n.get("event")) for n in nodes
             if n["kind"] in ("event", "message")]
    assert waits == [("event", "First", "tick"), ("event", "Second", "tick")]
    recv = registry.workflow("ev_two_topics").analysis.graph["nodes"]
    assert [(n["kind"], n.get("topic")) for n in recv if n["kind"] == "message"] == [
        ("message", "a"), ("message", "b"), ("message", "a")]


# --- pikku_prune ----------------------------------------------------------------------------


def test_prune_removes_only_events_and_messages_no_live_run_can_consume(capsys):
    with fake_clock() as fake:
        done = start("ev_wait", {"order": "p"})
        consumed = pw.send_event("payment.succeeded", 1, key="p")  # `done` consumed it
        waiting = start("ev_wait", {"order": "q"})  # created after `consumed`
        kept = pw.send_event("other", 1)  # `waiting` may still wait for it
        messages_run = start("ev_recv", {})
        pw.send(messages_run.pk, "m")  # received; the run completes
        live_msg_run = start("ev_recv", {"count": 2})
        pw.send(live_msg_run.pk, "live")
        fake.advance("40d")
        # Completed runs are kept (--status cancelled): their rows stay, their events
        # and messages go.
        call_command("pikku_prune", "--older-than", "30d", "--status", "cancelled")
    out = capsys.readouterr().out
    assert "deleted 1 event(s) no live run can consume and 1 message(s)" in out
    assert not WorkflowEvent.objects.filter(pk=consumed.id).exists()
    assert WorkflowEvent.objects.filter(pk=kept.id).exists()
    assert not WorkflowMessage.objects.filter(run=messages_run).exists()
    assert WorkflowMessage.objects.filter(run=live_msg_run).count() == 1
    assert reload(waiting).status == "suspended"
    # The consumption row lost its event; the step kept the recorded value.
    assert reload(done).output == 1
    assert WorkflowWait.objects.get(run=done).event_id is None
    assert WorkflowStep.objects.get(run=done, step_name="Paid").result == 1


def test_prune_keeps_an_event_a_live_run_created_before_it_has_not_consumed(capsys):
    with fake_clock() as fake:
        waiting = start("ev_wait", {"order": "q"})
        event = pw.send_event("payment.succeeded", 1, key="other")
        fake.advance("40d")
        call_command("pikku_prune", "--older-than", "30d")
        assert WorkflowEvent.objects.filter(pk=event.id).exists()
        pw.cancel_run(waiting.pk)
        call_command("pikku_prune", "--older-than", "30d")
    assert not WorkflowEvent.objects.filter(pk=event.id).exists()


def test_prune_dry_run_counts_events_and_messages(capsys):
    with fake_clock() as fake:
        pw.send_event("nobody", 1)
        fake.advance("2d")
        call_command("pikku_prune", "--older-than", "1d", "--dry-run")
    assert "1 event(s) and 0 message(s) would be deleted" in capsys.readouterr().out
    assert WorkflowEvent.objects.count() == 1


def test_send_result_is_exported_and_frozen():
    result = pw.send_event("nobody.waits")
    assert isinstance(result, pw.SendResult)
    assert result.woken == 0
    with pytest.raises(AttributeError):
        result.woken = 3  # type: ignore[misc]
    assert json.dumps(result.__dict__)


def test_the_public_error_of_a_waiting_run_says_what_it_waits_for():
    with fake_clock():
        run = start("ev_wait", {"order": "o-9", "timeout": 60})
        message_run = start("ev_recv", {})
    assert pw.get_run_status(run.pk)["error"] == run.error
    assert pw.get_run_status(message_run.pk)["error"] == {
        "code": "WAITING_FOR_MESSAGE", "message": "waiting for a message on 'default'",
        "step": "Get", "topic": "default", "timeout_at": None}


def test_a_wait_received_before_its_step_was_recorded_returns_that_event():
    """The pass died between the consumption and the step's checkpoint: the next pass
    takes the wait's event, not the next one."""
    run = start("ev_wait_twice", {"key": "crash"})
    first = WorkflowEvent.objects.create(event="tick", key="crash", data="first")
    WorkflowEvent.objects.create(event="tick", key="crash", data="second")
    WorkflowWait.objects.filter(run=run, step="First").update(
        outcome="received", event=first, ended_at=clock().now())
    from pikku_workflows.engine.events import wake_runs
    assert wake_runs([(run.pk, True)]) == 1  # the recovery of the dead pass
    assert reload(run).output == ["first", "second"]


def test_sent_by_records_the_user(django_user_model):
    user = django_user_model.objects.create(username="sender")
    run = start("ev_recv", {"count": 2})
    event = pw.send_event("e", sent_by=user)
    message = pw.send(run.pk, 1, sent_by=user.pk)
    assert WorkflowEvent.objects.get(pk=event.id).sent_by == user
    assert WorkflowMessage.objects.get(pk=message.id).sent_by == user
    from django.contrib.auth.models import AnonymousUser
    assert WorkflowEvent.objects.get(pk=pw.send_event("e", sent_by=AnonymousUser()).id
                                     ).sent_by is None


def test_recorded_runs_with_waits_replay_dry():
    from pikku_workflows.testing import assert_replays
    with fake_clock() as fake:
        runs = [start("ev_wait_twice", {"key": "d"}), start("ev_recv", {"count": 2}),
                start("ev_suspend_timeout", {"timeout": 5}), start("ev_graph", {"order": 1}),
                start("ev_wait", {"order": "never"})]
        pw.send_event("tick", 1, key="d")
        pw.send_event("tick", 2, key="d")
        pw.send(runs[1].pk, "m")
        pw.send_event("payment.succeeded", "g", key="1")
        fake.advance("10s")
    assert [reload(r).status for r in runs] == ["completed", "suspended", "completed",
                                                "completed", "suspended"]
    assert_replays(run_ids=[r.pk for r in runs])


def test_a_graph_run_failing_beside_a_wait_keeps_it_open_and_is_not_woken():
    run = start("ev_graph_fails_beside_a_wait", {})
    assert run.status == "failed" and run.error["code"] == "GRAPH_NODE_FAILED"
    assert WorkflowWait.objects.get(run=run).outcome is None
    assert pw.send_event("payment.succeeded", 1, key="f").woken == 0
    assert reload(run).status == "failed"
