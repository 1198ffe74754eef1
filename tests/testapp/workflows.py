"""Workflows and step functions the test suite runs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rest_framework import serializers

import pikku_workflows as pw
from pikku_workflows import mirror as pw_mirror

from .models import Ledger

# Every call of a test step function, by function name: the tests' side-effect ledger.
CALLS: dict[str, list[dict[str, Any]]] = defaultdict(list)


def _record(name: str, data: Any, ctx: Any = None) -> None:
    CALLS[name].append({
        "data": data,
        "invocation_id": getattr(ctx, "invocation_id", None),
        "attempt": getattr(ctx, "attempt", None),
        "step": getattr(ctx, "step_name", None),
    })


@pw.function
def add(data, ctx):
    _record("add", data, ctx)
    return data["a"] + data["b"]


@pw.function(name="double")
def double_it(data):
    _record("double", data)
    return data * 2


@pw.function
def flaky(data, ctx):
    """Fails ``data["fail_times"]`` times, then succeeds."""
    _record("flaky", data, ctx)
    if ctx.attempt <= data["fail_times"]:
        raise ConnectionError(f"transient failure on attempt {ctx.attempt}")
    return {"ok": True, "attempt": ctx.attempt}


@pw.function
def always_fails(data, ctx):
    _record("always_fails", data, ctx)
    raise ValueError(f"card declined for {data['order']}")


@pw.function
def refund(data):
    _record("refund", data)
    return {"refunded": True}


@pw.function
def returns_a_set(data):
    _record("returns_a_set", data)
    return {1, 2}


@pw.function
def echo(data):
    _record("echo", data)
    return data


@pw.function(atomic=True)
def write_ledger_then_crash(data, ctx):
    """Writes a row, then fails: with atomic=True the row must not survive the attempt."""
    Ledger.objects.create(invocation_id=ctx.invocation_id, note=f"attempt {ctx.attempt}")
    _record("write_ledger_then_crash", data, ctx)
    if ctx.attempt <= data["crash_times"]:
        raise RuntimeError("crashed after the write")
    return {"attempt": ctx.attempt}


@pw.workflow
def sequential(wf, data):
    total = wf.do("Add", add, {"a": data["x"], "b": 1})
    doubled = wf.do("Double", "double", total)
    return {"total": total, "doubled": doubled}


@pw.workflow
def branching(wf, data):
    if data["amount"] > 100:
        price = wf.do("Bulk discount", "echo", data["amount"] - 10)
    else:
        price = wf.do("Full price", "echo", data["amount"])
    return {"price": price}


@pw.workflow
def retrying(wf, data):
    options = {} if data.get("retries") is None else {"retries": data["retries"]}
    return wf.do("Flaky", "flaky", {"fail_times": data["fail_times"]}, **options)


@pw.workflow
def compensated(wf, data):
    wf.do("Charge", "always_fails", {"order": data["order"]}, retries=data.get("retries", 1),
          on_error="refund")
    return "unreachable"


@pw.workflow
def caught_failure(wf, data):
    try:
        wf.do("Charge", "always_fails", {"order": 1}, retries=0)
    except pw.WorkflowStepFailedError as exc:
        return {"handled": str(exc)}
    return {"handled": None}


@pw.workflow
def repeated_names(wf, data):
    return [wf.do("Echo", "echo", i) for i in range(3)]


@pw.workflow
def fan_out(wf, data):
    return wf.parallel([(f"Double {n}", "double", n) for n in data["numbers"]])


@pw.workflow
def fan_out_with_failure(wf, data):
    return wf.parallel([
        ("Ok", "echo", 1),
        ("Bad", "always_fails", {"order": 9}),
        ("Also ok", "echo", 3),
    ], retries=0)


@pw.workflow
def cancels_itself(wf, data):
    wf.do("Before", "echo", "before")
    if data.get("cancel"):
        wf.cancel("customer changed their mind")
    wf.do("After", "echo", "after")
    return "done"


@pw.workflow
def calls_missing_function(wf, data):
    first = wf.do("First", "echo", "first")
    later = wf.do("Later", "deployed_later", {"x": 1})
    return {"first": first, "later": later}


@pw.workflow
def bad_result(wf, data):
    return wf.do("Set", "returns_a_set", None, retries=3)


@pw.workflow
def bad_data(wf, data):
    return wf.do("Send object", "echo", object())


@pw.workflow
def bad_output(wf, data):
    return object()


@pw.workflow
def returns_given(wf, data):
    wf.do("Touch", "echo", data["value"])
    return data["value"]


@pw.workflow
def raises_itself(wf, data):
    wf.do("Ok", "echo", 1)
    raise KeyError("missing-thing")


@pw.workflow
def closures(wf, data):
    note = wf.do("Compose note", lambda: f"Order {data['order']} paid")
    return {"note": note}


@pw.workflow
def atomic_step(wf, data):
    return wf.do("Write", "write_ledger_then_crash", {"crash_times": data["crash_times"]})


@pw.workflow
def swallow_signals(wf, data):
    # A body's `except BaseException`-free handler must not swallow control flow.
    try:
        wf.cancel("stop here")
    except Exception:
        return "swallowed"
    return "not reached"


@pw.workflow
def with_state(wf, data):
    wf.set_state("a", 1)
    wf.set_state("b", {"nested": True})
    return wf.get_state()


# --- durable primitives ---------------------------------------------------------------

AUDIT_LOG: list[dict[str, Any]] = []


def collect_audit(entry: dict[str, Any]) -> None:
    """The AUDIT sink of the tests."""
    AUDIT_LOG.append(entry)


class DecisionSerializer(serializers.Serializer):
    approved = serializers.BooleanField()
    note = serializers.CharField(required=False, default="")


@pw.workflow
def two_gates(wf, data):
    first = wf.suspend("Awaiting warehouse")
    wf.do("Between", "echo", "between")
    second = wf.suspend("Awaiting courier")
    return {"warehouse": first, "courier": second}


@pw.workflow
def needs_approval(wf, data):
    wf.do("Prepare", "echo", "prepared")
    answer = wf.approval(
        "Manager sign-off",
        serializer=DecisionSerializer if data.get("validate") else None,
        expiry=data.get("expiry"),
        approvers=data.get("approvers", "any"),
        approver_permission=data.get("permission"),
    )
    wf.do("After", "echo", answer["status"])
    return answer


@pw.workflow
def sleeps_a_week(wf, data):
    wf.do("Before", "echo", "before")
    wf.sleep("A week", "7d")
    return wf.do("After", "echo", "after")


@pw.workflow
def child_ok(wf, data):
    return {"child_got": wf.do("Double", "double", data["n"])}


@pw.workflow
def child_fails(wf, data):
    if not data.get("fixed"):
        wf.do("Broken", "always_fails", {"order": "child"}, retries=0)
    return "fixed"


@pw.workflow
def child_suspends(wf, data):
    return {"resumed_with": wf.suspend("Child waits")}


@pw.workflow
def parent(wf, data):
    result = wf.do("Run child", data["child"], data.get("child_input", {"n": 21}))
    return {"parent_saw": result}


@pw.workflow
def versioned(wf, data):
    wf.do("One", "echo", 1)
    wf.suspend("Hold")
    return wf.do("Two", "echo", 2)


# --- queued steps (run on pikku_worker subprocesses: side effects go to the database) ----


@pw.function(queued=True, retries=2, retry_delay=0)
def q_record(data, ctx):
    """Records its invocation once (the dedupe key), then returns its input."""
    Ledger.objects.get_or_create(invocation_id=ctx.invocation_id,
                                 defaults={"note": f"{ctx.step_name}"})
    return data


@pw.function(queued=True, retries=2, retry_delay=0)
def q_slow_charge(data, ctx):
    """Charges once per invocation id, then is slow on its first attempt (to be killed)."""
    import time as _time

    Ledger.objects.get_or_create(invocation_id=ctx.invocation_id, defaults={"note": "charged"})
    if ctx.attempt == 1:
        _time.sleep(data.get("first_attempt_seconds", 30))
    return {"charged": True, "attempt": ctx.attempt}


@pw.function(queued=True, retries=2, retry_delay="200ms")
def q_flaky(data, ctx):
    if ctx.attempt <= data["fail_times"]:
        raise ConnectionError(f"flaky attempt {ctx.attempt}")
    return ctx.attempt


@pw.function(queued=True, retries=0, timeout=1)
def q_too_slow(data):
    import time as _time

    _time.sleep(5)
    return "never"


@pw.workflow
def ten_steps(wf, data):
    total = 0
    for i in range(10):
        fn = "q_record" if i % 2 else "echo"
        total += wf.do(f"Step {i}", fn, i)
    return total


@pw.workflow
def queued_fan_out(wf, data):
    return wf.parallel([(f"Item {i}", "q_record", i) for i in range(data["n"])])


@pw.workflow
def naps(wf, data):
    wf.do("Before", "echo", 1)
    wf.sleep("Nap", data.get("nap", "2s"))
    return wf.do("After", "q_record", data.get("tag", "after"))


@pw.workflow
def slow_charge(wf, data):
    return wf.do("Charge", "q_slow_charge", data)


@pw.workflow
def queued_retry(wf, data):
    return wf.do("Flaky", "q_flaky", {"fail_times": data["fail_times"]})


@pw.workflow
def queued_timeout(wf, data):
    return wf.do("Slow", "q_too_slow", None)


@pw.workflow
def one_queued(wf, data):
    return wf.do("Only", "q_record", data)


class BrokenMirror(pw_mirror.Mirror):
    """A mirror that always fails (the run must not notice)."""

    calls = 0

    def write(self, kind, row):
        BrokenMirror.calls += 1
        raise ConnectionError("the mirror is down")


@pw.function(queued=True, queue="pikku-test-dedicated-steps")
def q_isolated(data):
    return {"isolated": data}


@pw.workflow(queue="pikku-test-dedicated-runs")
def isolated(wf, data):
    return wf.do("Isolated", "q_isolated", data)


# --- graph workflows ----------------------------------------------------------------------


@pw.function
def create_user_profile(data):
    _record("create_user_profile", data)
    return {"email": data["email"], "user_id": 7}


@pw.function
def send_email(data):
    _record("send_email", data)
    return {"sent_to": data["to"], "subject": data["subject"]}


@pw.function
def review_account(data, ctx):
    _record("review_account", data)
    ctx.branch("approved" if data["ok"] else "rejected")
    return {"reviewed": True}


@pw.function
def square(data):
    _record("square", data)
    return data * data


@pw.function
def total(data):
    _record("total", data)
    return sum(data["values"])


@pw.function
def count_visits(data, ctx):
    count = ctx.get_state().get("visits", 0) + 1
    ctx.set_state("visits", count)
    ctx.branch("again" if count < data["times"] else "done")
    return count


@pw.function
def pick_branch(data, ctx):
    ctx.branch(data["branch"])
    return data["branch"]


@pw.function
def q_square(data):
    return data * data


pw.graph_workflow(
    "user_onboarding",
    nodes={"create_profile": "create_user_profile", "welcome": "send_email",
           "review": "review_account", "activate": "echo", "reject": "echo"},
    config={
        "create_profile": {"next": ["welcome", "review"]},
        "welcome": {"input": {"to": pw.ref("create_profile", "email"),
                              "subject": pw.template("Welcome $0!", [pw.ref("trigger", "name")])}},
        "review": {"input": {"ok": pw.ref("trigger", "ok")},
                   "next": {"approved": "activate", "rejected": "reject"}},
        "activate": {"input": {"activated": pw.ref("create_profile", "user_id")}},
        "reject": {"input": {"rejected": pw.ref("trigger", "email")}},
    },
    description="Create a profile, send a welcome mail, review and branch.",
)

pw.graph_workflow(
    "diamond",
    nodes={"a": "echo", "b": "add", "c": "add", "join": "total"},
    config={
        "a": {"next": ["b", "c"]},
        "b": {"input": {"a": pw.ref("a", "n"), "b": pw.ref("a", "n")}, "next": "join"},
        "c": {"input": {"a": pw.ref("a", "m"), "b": pw.ref("a", "m")}, "next": "join"},
        "join": {"input": {"values": [pw.ref("b"), pw.ref("c")]}},
    },
    output="join",
)

pw.graph_workflow(
    "squares",
    nodes={"numbers": "echo", "square": "square", "sum": "total"},
    config={
        "numbers": {"next": "square"},
        "square": {"for_each": pw.ref("numbers", "values"), "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
)

pw.graph_workflow(
    "squares_in_order",
    nodes={"square": "square", "sum": "total"},
    config={
        "square": {"for_each": pw.ref("trigger", "values"), "mode": "sequential",
                   "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
)

pw.graph_workflow(
    "loops",
    nodes={"begin": "echo", "visit": "count_visits", "finish": "echo"},
    config={
        "begin": {"next": "visit"},
        "visit": {"input": {"times": pw.ref("trigger", "times")},
                  "next": {"again": "visit", "done": "finish"}},
        "finish": {"input": {"visits": pw.ref("visit")}},
    },
    output="finish",
)

pw.graph_workflow(
    "deadlocks",
    nodes={"choose": "pick_branch", "left": "echo", "right": "echo"},
    config={
        "choose": {"next": {"x": "right", "y": "left"}},
        "right": {"input": {"needs": pw.ref("left")}},
    },
)

pw.graph_workflow(
    "graph_on_error",
    nodes={"charge": "always_fails", "cleanup": "refund", "after": "echo"},
    config={
        "charge": {"retries": 1, "on_error": "cleanup", "next": "after"},
    },
    entry="charge",
)

pw.graph_workflow(
    "two_doors",
    nodes={"web": "echo", "api": "echo", "done": "echo"},
    config={"web": {"next": "done"}, "api": {"next": "done"}},
)

pw.graph_workflow(
    "graph_with_child",
    nodes={"prepare": "echo", "child": "child_ok", "gate": "child_suspends"},
    config={"prepare": {"next": "child"},
            "child": {"input": {"n": pw.ref("prepare", "n")}, "next": "gate"},
            "gate": {"input": {}}},
)

pw.graph_workflow(
    "queued_graph",
    nodes={"numbers": "echo", "square": "q_square", "sum": "total"},
    config={
        "numbers": {"next": "square"},
        "square": {"for_each": pw.ref("numbers", "values"), "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
    output="sum",
)


# --- recovery and robustness ----------------------------------------------------------------

CLOSURE_FAILURES = {"left": 1}


@pw.workflow
def closure_fails_once(wf, data):
    def flaky_closure():
        if CLOSURE_FAILURES["left"] > 0:
            CLOSURE_FAILURES["left"] -= 1
            raise RuntimeError("first time")
        return 1

    return wf.do("Closure", flaky_closure, retries=0)


@pw.workflow
def prefixed_gates(wf, data):
    wf.approval("Manager sign-off")
    return wf.approval("Manager")


@pw.function(timeout="200ms", retries=1)
def too_slow_inline(data):
    import time as _time

    _time.sleep(data)
    return "finished"


@pw.workflow
def inline_timeout(wf, data):
    return wf.do("Slow", "too_slow_inline", data)


@pw.function(queued=True, timeout=1)
def q_quick(data):
    return 1


@pw.function(retries=0)
def slow_in_pass(data):
    import time as _time

    _time.sleep(1.5)
    return 2


@pw.workflow
def queued_then_slow(wf, data):
    wf.do("Q", "q_quick", None)
    return wf.do("Slow", "slow_in_pass", None)


@pw.function(queued=True, retries=1, retry_delay=0)
def q_fails(data):
    raise ValueError(f"queued node failed for {data}")


@pw.function(queued=True)
def q_total(data):
    return sum(data["values"])


@pw.function(queued=True)
def q_double_n(data):
    return data["n"] * 2


pw.graph_workflow(
    "queued_diamond",
    nodes={"a": "echo", "b": "q_double_n", "c": "q_double_n", "join": "q_total"},
    config={
        "a": {"next": ["b", "c"]},
        "b": {"input": {"n": pw.ref("a", "n")}, "next": "join"},
        "c": {"input": {"n": pw.ref("a", "m")}, "next": "join"},
        "join": {"input": {"values": [pw.ref("b"), pw.ref("c")]}},
    },
    output="join",
)

pw.graph_workflow(
    "queued_sequential",
    nodes={"square": "q_square", "sum": "q_total"},
    config={
        "square": {"for_each": pw.ref("trigger", "values"), "mode": "sequential",
                   "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
    output="sum",
)

pw.graph_workflow(
    "queued_on_error",
    nodes={"charge": "q_fails", "cleanup": "refund"},
    config={"charge": {"on_error": "cleanup"}},
    entry="charge",
)


@pw.workflow
def flaky_fan_out(wf, data):
    """Queued steps in parallel, each failing ``fail_times`` times first."""
    return wf.parallel([(f"Item {i}", "q_flaky", {"fail_times": data["fail_times"]})
                        for i in range(data["n"])])


@pw.workflow
def inline_retry_after_a_delay(wf, data):
    """An in-pass step that fails once, then waits ``delay`` before its retry."""
    return wf.do("Flaky", "flaky", {"fail_times": 1}, retries=1, retry_delay=data["delay"])


# --- engine corrections ---------------------------------------------------------------------

# A node that fails once and retries after a delay: the run waits for the retry.
graph_retry_after_delay = pw.graph_workflow(
    "graph_retry_after_delay",
    nodes={"charge": "flaky", "receipt": "echo"},
    config={"charge": {"retries": 3, "retry_delay": "5s", "next": "receipt"},
            "receipt": {"input": {"charged": pw.ref("charge")}}},
    output="receipt",
)
queued_graph_retry_after_delay = pw.graph_workflow(
    "queued_graph_retry_after_delay",
    nodes={"charge": "q_flaky", "receipt": "echo"},
    config={"charge": {"retries": 3, "retry_delay": "300ms", "next": "receipt"},
            "receipt": {"input": {"charged": pw.ref("charge")}}},
    output="receipt",
)
