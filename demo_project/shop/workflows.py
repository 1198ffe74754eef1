"""The demo shop's workflows: every feature of pikku_workflows in two business processes.

- ``order_saga`` (a DSL workflow): reserve stock, a bulk discount for big orders, a charge
  that retries and is refunded if it finally fails (or, for an order paid by bank
  transfer, a wait for the bank's ``payment.succeeded`` event keyed by the order, with a
  timeout: no payment in time releases the stock and cancels the order), a manager's
  approval for large orders (four eyes: not the admin who started the order),
  a cool-off sleep before shipping, labels printed in parallel and an invoice made by a
  child run; one order per customer at a time (``Concurrency``: the others queue).
- ``team_onboarding`` (a graph workflow): a profile, then in parallel a welcome email,
  default to-dos and a review; the review's branch activates or rejects the account, and
  every teammate listed is invited (``for_each``).
- ``nightly_report`` (a DSL workflow) started by the schedule ``nightly-report``: every
  minute in the demo, where a shop would write ``cron="0 3 * * *"``.
"""

from __future__ import annotations

import zlib

from rest_framework import serializers

import pikku_workflows as pw

# --- steps of the order saga ---------------------------------------------------------------


@pw.function
def reserve_stock(data):
    return {"reserved": data["skus"]}


@pw.function
def release_stock(data):
    return {"released": data["skus"]}


@pw.function
def calc_discount(data):
    return {"discount": round(data["amount"] * 0.1, 2)}


@pw.function(retries=3, retry_delay="100ms")
def charge_payment(data, ctx):
    """A payment provider that times out on the first attempt of every charge, and
    declines the card ``4000-0000``."""
    if data.get("card") == "4000-0000":
        raise ValueError(f"card {data['card']} declined")
    if ctx.attempt == 1:
        raise ConnectionError("payment provider timed out")
    # invocation_id is the same on every attempt: the provider's idempotency key.
    return {"charge_id": f"ch_{ctx.invocation_id[:8]}", "amount": data["amount"]}


@pw.function
def refund_payment(data):
    return {"refunded": True, "because": data["error"]["message"]}


@pw.function
def make_label(data):
    return f"LABEL-{data['sku'].upper()}-{zlib.crc32(data['sku'].encode()) % 1000:03d}"


@pw.function
def render_invoice(data):
    lines = [f"{sku}: 1" for sku in data["skus"]]
    return {"number": f"INV-{data['order_id']:05d}", "lines": lines, "total": data["amount"]}


@pw.function
def ship_parcel(data):
    return {"tracking": f"TRACK-{data['order_id']:05d}", "labels": len(data["labels"])}


@pw.workflow(description="The invoice of an order: a child run of order_saga.")
def create_invoice(wf, data):
    invoice = wf.do("Render invoice", render_invoice, data)
    return {"invoice": invoice["number"], "total": invoice["total"]}


#: Orders above this amount wait for a manager's approval.
APPROVAL_LIMIT = 500
#: Who may approve a large order: a holder of this permission (the demo's ``manager``)
#: who did not start the order (``not-initiator``: four eyes; the ``admin`` who starts
#: the demo's orders may not approve them).
APPROVER_PERMISSION = "pikku_workflows.approve_workflowrun"


class OrderInput(serializers.Serializer):
    """An order; the initial values are the example the console's start form shows."""

    order_id = serializers.IntegerField(initial=8)
    customer = serializers.CharField(max_length=100, required=False, default="guest",
                                     initial="ada",
                                     help_text="one order per customer runs at a time")
    amount = serializers.IntegerField(min_value=0, initial=40)
    skus = serializers.ListField(child=serializers.CharField(), min_length=1,
                                 initial=["pin"])
    card = serializers.CharField(required=False, help_text="4000-... is declined")
    cool_off = serializers.JSONField(required=False, initial="1s",
                                     help_text="a duration: seconds or text (\"2s\")")
    pay_by = serializers.ChoiceField(choices=["card", "transfer"], required=False,
                                     help_text="transfer: wait for payment.succeeded")
    payment_timeout = serializers.JSONField(
        required=False, help_text="how long a transfer may take (default \"1h\")")


#: The event a bank sends (through its webhook) when a transfer arrives, keyed by the
#: order (``payment_key``); the demo's start page sends it with a button.
PAYMENT_EVENT = "payment.succeeded"
#: How long an order paid by transfer waits for its payment, unless its input says.
PAYMENT_TIMEOUT = "1h"


def payment_key(order_id: object) -> str:
    """The key of an order's ``payment.succeeded`` event: ``order-8``."""
    return f"order-{order_id}"


@pw.workflow(description="Reserve, discount, charge (refund on failure), approve large "
                         "orders, cool off, print labels in parallel, invoice, ship.",
             tags=("demo", "orders"), input_serializer=OrderInput,
             # One order per customer at a time: the next one waits (scheduled, holding
             # no worker) until the customer's current order ends.
             concurrency=pw.Concurrency(max=1, key="customer"))
def order_saga(wf, data):
    wf.do("Reserve stock", reserve_stock, {"skus": data["skus"]})
    amount = data["amount"]
    if amount > 1000:
        amount -= wf.do("Apply bulk discount", "calc_discount", {"amount": amount})["discount"]
    if data.get("pay_by") == "transfer":
        # The bank's webhook sends the event (pw.send_event, or POST events/); None when
        # the timeout passed first: nothing was charged, the stock goes back.
        payment = wf.wait_for_event("Payment received", PAYMENT_EVENT,
                                    key=payment_key(data["order_id"]),
                                    timeout=data.get("payment_timeout", PAYMENT_TIMEOUT))
        if payment is None:
            wf.do("Release stock", release_stock, {"skus": data["skus"]})
            wf.cancel("no payment received in time")
    else:
        payment = wf.do("Charge", charge_payment,
                        {"order": data["order_id"], "amount": amount, "card": data.get("card")},
                        on_error="refund_payment")
    if amount > APPROVAL_LIMIT:
        answer = wf.approval("Manager sign-off", expiry="3d", approvers="not-initiator",
                             approver_permission=APPROVER_PERMISSION)
        if answer["status"] != "decided" or not (answer["data"] or {}).get("approved"):
            wf.do("Refund", refund_payment, {"error": {"message": "not approved"}})
            wf.cancel("the manager did not approve the order")
    wf.sleep("Cool-off", data.get("cool_off", "2s"))
    labels = wf.parallel([(f"Label {sku}", "make_label", {"sku": sku}) for sku in data["skus"]])
    invoice = wf.do("Invoice", "create_invoice",
                    {"order_id": data["order_id"], "skus": data["skus"], "amount": amount})
    shipment = wf.do("Ship", ship_parcel, {"order_id": data["order_id"], "labels": labels})
    return {"status": "shipped", "payment": payment, "invoice": invoice, **shipment}


# --- the onboarding graph ------------------------------------------------------------------


@pw.function
def create_profile(data):
    return {"email": data["email"], "name": data["name"], "team": data.get("team", [])}


# The email provider accepts 10 messages a second: the "email" limit of the settings'
# LIMITS holds every worker to it (the console's Limits page can change it).
@pw.function(limits=["email"])
def send_welcome(data):
    return {"sent_to": data["to"], "subject": data["subject"]}


@pw.function
def create_default_todos(data):
    return ["Read the handbook", "Meet the team", f"Set up {data['email']}"]


@pw.function
def review_signup(data, ctx):
    """Approve people from example.com, reject the others: the branch the graph takes."""
    approved = data["email"].endswith("@example.com")
    ctx.branch("approved" if approved else "rejected")
    return {"approved": approved}


@pw.function
def activate_account(data):
    return {"active": True, "email": data["email"]}


@pw.function
def notify_rejection(data):
    return {"rejected": data["email"]}


@pw.function(retries=2, retry_delay="100ms")
def invite_teammate(data):
    return {"invited": data["teammate"], "by": data["by"]}


team_onboarding = pw.graph_workflow(
    "team_onboarding",
    description="A profile, then welcome, to-dos and review in parallel; the review "
                "branches to activate or reject; each teammate listed is invited.",
    tags=("demo", "accounts"),
    nodes={
        "profile": "create_profile", "welcome": "send_welcome", "todos": "create_default_todos",
        "review": "review_signup", "activate": "activate_account",
        "reject": "notify_rejection", "invite": "invite_teammate",
    },
    config={
        "profile": {"next": ["welcome", "todos", "review"]},
        "welcome": {"input": {"to": pw.ref("profile", "email"),
                              "subject": pw.template("Welcome, $0!", [pw.ref("profile", "name")])}},
        "todos": {"input": {"email": pw.ref("profile", "email")}},
        "review": {"input": {"email": pw.ref("profile", "email")},
                   "next": {"approved": "activate", "rejected": "reject"}},
        "activate": {"input": {"email": pw.ref("profile", "email")}, "next": "invite"},
        "reject": {"input": {"email": pw.ref("profile", "email")}},
        "invite": {"for_each": pw.ref("profile", "team"),
                   "input": {"teammate": pw.ref("$item"), "by": pw.ref("profile", "name")}},
    },
)

# --- the nightly report, started by a schedule ----------------------------------------------


@pw.function
def count_orders(data):
    return {"orders": len(data.get("since") or "") % 7, "since": data.get("since")}


@pw.function
def send_report(data):
    return {"sent_to": data["to"], "orders": data["orders"]}


@pw.workflow(description="Yesterday's orders, mailed to the shop owner; started by the "
                         "schedule nightly-report.")
def nightly_report(wf, data):
    # The tick's own time, the same in every retry and replay (never "now").
    tick = wf.scheduled_at
    since = tick.isoformat() if tick else None
    counted = wf.do("Count orders", count_orders, {"since": since})
    return wf.do("Send report", send_report, {"to": (data or {}).get("to", "owner@example.com"),
                                              "orders": counted["orders"]})


# Every minute so that the demo shows ticks; a real shop: cron="0 3 * * *", tz="Europe/Paris".
pw.schedule("nightly-report", "nightly_report", every="1min",
            input={"to": "owner@example.com"}, overlap="skip", catchup="5min")

#: What the demo's start page offers: a workflow, a label and its input.
EXAMPLES = [
    ("order_saga", "A small order (charge retried, labels, invoice child run)",
     {"order_id": 8, "customer": "ada", "amount": 40, "skus": ["pin"], "cool_off": "1s"}),
    ("order_saga", "A large order (bulk discount, waits for a manager's approval)",
     {"order_id": 7, "customer": "bo", "amount": 1200, "skus": ["mug", "tee", "cap"],
      "cool_off": "2s"}),
    ("order_saga", "A declined card (four attempts: 3 retries, then the refund runs once)",
     {"order_id": 9, "customer": "cy", "amount": 80, "skus": ["sock"],
      "card": "4000-0000"}),
    ("order_saga", "An order paid by bank transfer (waits for payment.succeeded, 10 min)",
     {"order_id": 10, "amount": 60, "skus": ["hat"], "pay_by": "transfer",
      "payment_timeout": "10min", "cool_off": "1s"}),
    ("team_onboarding", "Onboard Ada and invite her team (approved branch, for_each)",
     {"email": "ada@example.com", "name": "Ada", "team": ["grace", "alan", "edsger"]}),
    ("team_onboarding", "Onboard Bo (rejected branch)",
     {"email": "bo@elsewhere.org", "name": "Bo", "team": []}),
]
