"""The demo shop's workflows: an order, a flaky payment provider, a fan-out of labels."""

from __future__ import annotations

import zlib

import pikku_workflows as pw


@pw.function
def reserve_stock(data):
    return {"reserved": data["skus"]}


@pw.function
def calc_discount(data):
    return {"discount": round(data["amount"] * 0.1, 2)}


@pw.function(retries=3, retry_delay="100ms")
def charge_payment(data, ctx):
    """A payment provider that times out on the first attempt of every charge."""
    if ctx.attempt == 1:
        raise ConnectionError("payment provider timed out")
    return {"charge_id": f"ch_{ctx.invocation_id[:8]}", "amount": data["amount"]}


@pw.function
def refund_payment(data):
    return {"refunded": True, "because": data["error"]["message"]}


@pw.function
def make_label(data):
    return f"LABEL-{data['sku'].upper()}-{zlib.crc32(data['sku'].encode()) % 1000:03d}"


@pw.function
def decline_card(data):
    raise ValueError(f"card {data['card']} declined")


@pw.workflow(description="Reserve stock, discount big orders, charge, print labels.")
def process_order(wf, data):
    wf.do("Reserve stock", reserve_stock, {"skus": data["skus"]})
    amount = data["amount"]
    if amount > 1000:
        amount -= wf.do("Apply bulk discount", "calc_discount", {"amount": amount})["discount"]
    payment = wf.do("Charge", charge_payment, {"order": data["order_id"], "amount": amount},
                    on_error="refund_payment")
    note = wf.do("Compose note", lambda: f"Order {data['order_id']} paid {amount}")
    labels = wf.parallel([(f"Label {sku}", "make_label", {"sku": sku}) for sku in data["skus"]])
    return {"status": "shipped", "payment": payment, "note": note, "labels": labels}


@pw.workflow(description="A charge that is declined: the refund runs once, the run fails.")
def declined_order(wf, data):
    wf.do("Charge", "decline_card", {"card": data["card"]}, retries=1, retry_delay=0,
          on_error="refund_payment")
    return {"status": "never reached"}
