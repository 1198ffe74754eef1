"""The workflows of the schedule tests (tests/unit/test_schedules*.py, the integration and
fault tests of schedules)."""

from __future__ import annotations

from rest_framework import serializers

import pikku_workflows as pw
from tests.testapp.shared import CALLS


@pw.function
def sched_note(data):
    CALLS.setdefault("sched_note", []).append(data)
    return data


@pw.workflow
def sched_echo(wf, data):
    """Records its tick time: ``wf.scheduled_at`` is None for a run no schedule started."""
    at = wf.scheduled_at
    wf.do("Note", sched_note, {"data": data, "at": at.isoformat() if at else None})
    return {"data": data, "scheduled_at": at.isoformat() if at else None}


@pw.workflow
def sched_hold(wf, data):
    """Stays live (suspended) until resumed: a run that outlives its schedule's interval."""
    wf.suspend("hold")
    return "released"


@pw.workflow
def sched_naps(wf, data):
    """An inline run that sleeps on the real clock before it ends."""
    wf.sleep("Nap", data)
    return wf.do("After", sched_note, "woke")


class CountInput(serializers.Serializer):
    n = serializers.IntegerField(min_value=0)


@pw.workflow(input_serializer=CountInput)
def sched_typed(wf, data):
    return data["n"]
