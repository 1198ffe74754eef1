"""The workflows and step functions that tests in several modules run, and the ledgers
they write. The workflows of one test module live beside it (``tests/unit/workflows_*.py``,
``tests/integration/workflows_rq.py``); ``tests/testapp/workflows.py`` imports them all,
so that every process loading ``tests.settings`` (the tests' and the ``pikku_worker``
subprocesses') registers every one."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rest_framework import serializers

import pikku_workflows as pw

from .models import Ledger

# --- The ledgers the tests read (cleared around each test by tests/conftest.py) ------------


# Every call of a test step function, by function name: the tests' side-effect ledger.
CALLS: dict[str, list[dict[str, Any]]] = defaultdict(list)


def record(name: str, data: Any, ctx: Any = None) -> None:
    CALLS[name].append({
        "data": data,
        "invocation_id": getattr(ctx, "invocation_id", None),
        "attempt": getattr(ctx, "attempt", None),
        "step": getattr(ctx, "step_name", None),
    })


AUDIT_LOG: list[dict[str, Any]] = []


def collect_audit(entry: dict[str, Any]) -> None:
    """The AUDIT sink of the tests."""
    AUDIT_LOG.append(entry)


# --- Step functions ------------------------------------------------------------------------


@pw.function
def add(data, ctx):
    record("add", data, ctx)
    return data["a"] + data["b"]


@pw.function(name="double")
def double_it(data):
    record("double", data)
    return data * 2


@pw.function
def flaky(data, ctx):
    """Fails ``data["fail_times"]`` times, then succeeds."""
    record("flaky", data, ctx)
    if ctx.attempt <= data["fail_times"]:
        raise ConnectionError(f"transient failure on attempt {ctx.attempt}")
    return {"ok": True, "attempt": ctx.attempt}


@pw.function
def always_fails(data, ctx):
    record("always_fails", data, ctx)
    raise ValueError(f"card declined for {data['order']}")


@pw.function
def refund(data):
    record("refund", data)
    return {"refunded": True}


@pw.function
def echo(data):
    record("echo", data)
    return data


@pw.function
def total(data):
    record("total", data)
    return sum(data["values"])


# --- DSL workflows -------------------------------------------------------------------------


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
def fan_out(wf, data):
    return wf.parallel([(f"Double {n}", "double", n) for n in data["numbers"]])


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
def bad_data(wf, data):
    return wf.do("Send object", "echo", object())


@pw.workflow
def returns_given(wf, data):
    wf.do("Touch", "echo", data["value"])
    return data["value"]


@pw.workflow
def closures(wf, data):
    note = wf.do("Compose note", lambda: f"Order {data['order']} paid")
    return {"note": note}


# --- Durable primitives: suspend, approvals, sleeps, child runs ----------------------------


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
def child_suspends(wf, data):
    return {"resumed_with": wf.suspend("Child waits")}


@pw.workflow
def parent(wf, data):
    result = wf.do("Run child", data["child"], data.get("child_input", {"n": 21}))
    return {"parent_saw": result}


# --- Queued steps (on the rq executor, side effects go to the database) --------------------


@pw.function(queued=True, retries=2, retry_delay=0)
def q_record(data, ctx):
    """Records its invocation once (the dedupe key), then returns its input."""
    Ledger.objects.get_or_create(invocation_id=ctx.invocation_id,
                                 defaults={"note": f"{ctx.step_name}"})
    return data


@pw.function
def q_square(data):
    return data * data


@pw.workflow
def ten_steps(wf, data):
    total = 0
    for i in range(10):
        fn = "q_record" if i % 2 else "echo"
        total += wf.do(f"Step {i}", fn, i)
    return total


@pw.workflow
def naps(wf, data):
    wf.do("Before", "echo", 1)
    wf.sleep("Nap", data.get("nap", "2s"))
    return wf.do("After", "q_record", data.get("tag", "after"))


@pw.workflow
def one_queued(wf, data):
    return wf.do("Only", "q_record", data)


# --- Graph workflows -----------------------------------------------------------------------


@pw.function
def create_user_profile(data):
    record("create_user_profile", data)
    return {"email": data["email"], "user_id": 7}


@pw.function
def send_email(data):
    record("send_email", data)
    return {"sent_to": data["to"], "subject": data["subject"]}


@pw.function
def review_account(data, ctx):
    record("review_account", data)
    ctx.branch("approved" if data["ok"] else "rejected")
    return {"reviewed": True}


@pw.function
def count_visits(data, ctx):
    count = ctx.get_state().get("visits", 0) + 1
    ctx.set_state("visits", count)
    ctx.branch("again" if count < data["times"] else "done")
    return count


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
    "queued_graph",
    nodes={"numbers": "echo", "square": "q_square", "sum": "total"},
    config={
        "numbers": {"next": "square"},
        "square": {"for_each": pw.ref("numbers", "values"), "next": "sum"},
        "sum": {"input": {"values": pw.ref("square")}},
    },
    output="sum",
)


@pw.workflow
def gate_after_suspend(wf, data):
    """A declared approval gate the run reaches only after a resume."""
    wf.suspend("Before the gate")
    return wf.approval("Finance sign-off")


@pw.workflow
def gate_named_at_run_time(wf, data):
    """An approval gate whose reason is built from the input: known once reached."""
    wf.suspend("Before the gate")
    return wf.approval(f"Sign-off by {data['who']}")


@pw.workflow
def writes_state(wf, data):
    wf.set_state(data["key"], data.get("value"))
    return wf.get_state()
