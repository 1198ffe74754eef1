"""The workflows of tests/unit/test_primitives.py."""

from __future__ import annotations

import pikku_workflows as pw


@pw.workflow
def child_fails(wf, data):
    if not data.get("fixed"):
        wf.do("Broken", "always_fails", {"order": "child"}, retries=0)
    return "fixed"


@pw.workflow
def versioned(wf, data):
    wf.do("One", "echo", 1)
    wf.suspend("Hold")
    return wf.do("Two", "echo", 2)
