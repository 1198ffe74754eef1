"""Workflows of the console page tests (tests/unit/admin/test_pages.py, the browser tests)."""

from __future__ import annotations

from rest_framework import serializers

import pikku_workflows as pw


def _parse_amount(data):
    return int(data["amount"])  # KeyError on an order without one: the input's fault


@pw.workflow
def fails_on_input(wf, data):
    amount = _parse_amount(data)
    return wf.do("Use amount", lambda: amount)


@pw.workflow
def fails_after_a_step(wf, data):
    count = wf.do("Count", lambda: 3)
    return {"share": 10 // (count - 3)}  # ZeroDivisionError once the step ran


@pw.workflow
def held_until_resumed(wf, data):
    wf.do("Prepare", lambda: "ready")
    given = wf.suspend("Hold")
    return {"given": given}


class CustomerInput(serializers.Serializer):
    name = serializers.CharField(initial="Ada")
    email = serializers.EmailField()


class OrderInput(serializers.Serializer):
    order_id = serializers.IntegerField(initial=8)
    quantity = serializers.IntegerField(min_value=2)
    skus = serializers.ListField(child=serializers.CharField())
    express = serializers.BooleanField()
    kind = serializers.ChoiceField(choices=["retail", "wholesale"])
    customer = CustomerInput()
    ref = serializers.CharField(read_only=True)


@pw.workflow(input_serializer=OrderInput)
def takes_an_order(wf, data):
    return {"order": data["order_id"], "for": data["customer"]["name"]}


@pw.workflow
def approve_then_hold(wf, data):
    answer = wf.approval("Sign-off")
    wf.suspend("Hold")
    return {"approved": answer["status"] == "decided"}
