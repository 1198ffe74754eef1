"""Every workflow of the test suite, registered in each process that loads
``tests.settings``: pikku_workflows autodiscovers this module (an installed app's
``workflows``) in the test process and in the ``pikku_worker`` subprocesses of the
integration tests alike.

The workflows that several test modules run are in ``shared.py``; those of one test module
live beside it, in ``tests/unit/workflows_<area>.py`` and
``tests/integration/workflows_rq.py``.
"""

from __future__ import annotations

from tests.api import workflows_events_api
from tests.integration import workflows_rq
from tests.testapp import shared
from tests.unit import (
    workflows_engine,
    workflows_events,
    workflows_executors,
    workflows_failures,
    workflows_flow,
    workflows_forks,
    workflows_graph,
    workflows_lifecycle,
    workflows_pages,
    workflows_primitives,
    workflows_recovery,
    workflows_schedules,
    workflows_step_limits,
    workflows_timestamps,
    workflows_tracing,
)

MODULES = [shared, workflows_engine, workflows_events, workflows_events_api,
           workflows_executors, workflows_failures, workflows_flow, workflows_forks,
           workflows_graph,
           workflows_lifecycle, workflows_pages, workflows_primitives, workflows_recovery,
           workflows_rq, workflows_schedules, workflows_step_limits,
           workflows_timestamps, workflows_tracing]
