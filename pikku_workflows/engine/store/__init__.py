"""The one writer of workflow rows: runs, steps, attempts, leases, status changes.

Every write of the engine and of the surfaces above it comes through here, each one
guarded so that races are decided by rowcounts. This facade gathers the store's modules,
one idea each:

- ``unit_of_work``: a pass's writes (``UnitOfWork``) and the protocol that commits them:
  write-behind outcomes, the checkpoint, the pass's end.
- ``runs``: run rows, leases, status moves from outside a pass.
- ``attempts``: a step's moves outside the checkpoint (guarded outcomes, claims, dispatch).
- ``queries``: the reads of passes, recovery and operations.
- ``state``: a run's state keys.
- ``surfaces``: writes of the lifecycle, recovery and the surfaces.
- ``versions``: workflow version rows.
- ``forks``: a fork's run with the steps it keeps from its source.
- ``limits`` and ``concurrency``: named step limits' slot rows; workflow concurrency's
  lock, live and queued runs, and promotion (``engine.flow`` decides with them).

The writes whose rule a database can do in its own SQL (a checkpoint, a run's end, a
lease, a claim...) go to the backend of the database's vendor (``backends``), chosen
once; the rest are the ORM's, on every database.
"""

from __future__ import annotations

from .attempts import (
    batched_marks,
    claim_named_step,
    claim_step,
    fail_lost_attempt,
    last_attempt,
    leave_pending,
    mark_dispatched,
    new_step,
    open_suspend_gate,
    record_failure,
    record_success,
    renew_step_lease,
    requeue_failed,
    set_branch,
)
from .backends import LeasedRun
from .errors import PassAborted, StaleAttemptError
from .forks import adopt_kept_children, create_fork, kept_steps
from .limits import wait_for_limit
from .queries import (
    awaited_steps,
    child_run_statuses,
    due_runs,
    left_to_this_pass,
    live_child_ids,
    load_steps,
    parent_run_id,
    status_and_flight,
    steps_in_flight,
    unseen_outcomes,
    with_live_descendants,
)
from .rows import waiting_for
from .runs import (
    create_run,
    drop_orphans,
    insert_runs,
    leased_fields,
    load_run,
    lock_run,
    new_lease_owner,
    new_run,
    promote_scheduled_run,
    renew_run_lease,
    run_exists,
    run_uuid,
    set_run_status,
    take_lease,
)
from .state import merge_state_key, read_state_key, replace_state_key_if
from .surfaces import (
    attach_child_run,
    close_waiting_steps,
    delete_runs,
    reopen_failed_steps,
    touch_run,
    touch_step,
)
from .unit_of_work import UnitOfWork
from .versions import ensure_version, set_version_status, version_status

__all__ = [
    "LeasedRun",
    "PassAborted",
    "StaleAttemptError",
    "UnitOfWork",
    "adopt_kept_children",
    "attach_child_run",
    "awaited_steps",
    "batched_marks",
    "child_run_statuses",
    "claim_named_step",
    "claim_step",
    "close_waiting_steps",
    "create_fork",
    "create_run",
    "delete_runs",
    "drop_orphans",
    "due_runs",
    "ensure_version",
    "fail_lost_attempt",
    "insert_runs",
    "kept_steps",
    "last_attempt",
    "leased_fields",
    "leave_pending",
    "left_to_this_pass",
    "live_child_ids",
    "load_run",
    "load_steps",
    "lock_run",
    "mark_dispatched",
    "merge_state_key",
    "new_lease_owner",
    "new_run",
    "new_step",
    "open_suspend_gate",
    "parent_run_id",
    "promote_scheduled_run",
    "read_state_key",
    "record_failure",
    "record_success",
    "renew_run_lease",
    "renew_step_lease",
    "reopen_failed_steps",
    "replace_state_key_if",
    "requeue_failed",
    "run_exists",
    "run_uuid",
    "set_branch",
    "set_run_status",
    "set_version_status",
    "status_and_flight",
    "steps_in_flight",
    "take_lease",
    "touch_run",
    "touch_step",
    "unseen_outcomes",
    "version_status",
    "wait_for_limit",
    "waiting_for",
    "with_live_descendants",
]
