"""``output_serializer`` on the rq executor (jobs drained in this process). The inline
cases and the workflows are in tests/unit/test_output_serializer.py."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.testing import drain_queues
from tests.unit import test_output_serializer
from tests.unit.test_output_serializer import BAD, GOOD, _check_invalid, _check_valid

workflows = test_output_serializer.workflows  # the fixture


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "data"), [
    ("os_dsl", {"queued": True}), ("os_dsl", {}), ("os_graph", {})])
def test_rq_output_is_validated(workflows, rq_executor, name, data):
    good = pw.start_workflow(name, {**data, "out": GOOD})
    bad = pw.start_workflow(name, {**data, "out": BAD})
    assert good.inline is False
    drain_queues()
    _check_valid(good)
    _check_invalid(bad)
