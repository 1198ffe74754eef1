"""The store's own signals: a pass that lost its run, an attempt that lost its step."""

from __future__ import annotations

from ...exceptions import WorkflowRunNotFoundError, WorkflowSignal
from ...models import WorkflowStep
from ...types import RunId


class PassAborted(WorkflowSignal):
    """The run stopped being ours mid-pass (cancelled from outside, or the lease was lost)."""


class StaleAttemptError(Exception):
    """A worker's attempt is no longer the step's current one (its lease was taken over)."""


def not_found(run_id: RunId) -> WorkflowRunNotFoundError:
    """The error of an unknown (or malformed) run id."""
    return WorkflowRunNotFoundError(f"no workflow run has the id '{run_id}'")


def stale(step: WorkflowStep) -> StaleAttemptError:
    """The error of an outcome written for an attempt that was taken over."""
    return StaleAttemptError(f"step {step.step_name!r}: attempt {step.attempt_count} was "
                             "taken over; its outcome is not recorded")
