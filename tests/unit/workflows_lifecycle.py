"""The workflows of tests/unit/test_lifecycle.py."""

from __future__ import annotations

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun


@pw.workflow
def parent_child_and_failure(wf, data):
    return wf.parallel([("Child", "child_suspends", {}),
                        ("Broken", "always_fails", {"order": "parallel"})], retries=0)


@pw.workflow
def parent_catches_child_sibling(wf, data):
    try:
        wf.parallel([("Child", "child_suspends", {}),
                     ("Broken", "always_fails", {"order": "parallel"})], retries=0)
    except pw.WorkflowStepFailedError:
        return "caught"
    return "not reached"


@pw.workflow
def grandparent_of_suspended(wf, data):
    return wf.parallel([("Middle", "parent", {"child": "child_suspends", "child_input": {}}),
                        ("Broken", "always_fails", {"order": "grand"})], retries=0)


@pw.workflow
def nests_itself(wf, data):
    if data["n"] <= 0:
        return 0
    return wf.do("Deeper", "nests_itself", {"n": data["n"] - 1}) + 1


@pw.function
def delete_own_run(data, ctx):
    WorkflowRun.objects.filter(pk=ctx.run_id).delete()
    return "deleted"


@pw.workflow
def deletes_itself(wf, data):
    deleted = wf.do("Delete", delete_own_run, {})
    if data.get("then"):
        wf.do(data["then"], "echo", 1)
    return deleted
