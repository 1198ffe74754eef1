"""Public errors, and the control-flow signals that unwind a workflow body."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from .types import JSONObject, JSONValue, RunId


class WorkflowError(Exception):
    """Base class of every error pikku_workflows raises on purpose."""

    code = "WORKFLOW_ERROR"
    http_status = 400


class WorkflowNotFoundError(WorkflowError):
    """No workflow is registered under the given name."""

    code = "WORKFLOW_NOT_FOUND"
    http_status = 404


class WorkflowRunNotFoundError(WorkflowError):
    """No run has the given id."""

    code = "RUN_NOT_FOUND"
    http_status = 404


class WorkflowRunFailedError(WorkflowError):
    """A run awaited by ``run_to_completion`` ended ``failed``."""

    code = "RUN_FAILED"
    http_status = 422

    def __init__(self, message: str, *, run_id: RunId | None = None,
                 error: JSONObject | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.error: JSONObject = error or {}


class WorkflowRunCancelledError(WorkflowError):
    """A run awaited by ``run_to_completion`` ended ``cancelled``."""

    code = "WORKFLOW_CANCELLED"
    http_status = 409

    def __init__(self, message: str, *, run_id: RunId | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class WorkflowRunSuspendedError(WorkflowError):
    """A run awaited by ``run_to_completion`` suspended instead of finishing."""

    code = "WORKFLOW_SUSPENDED"
    http_status = 409

    def __init__(self, message: str, *, run_id: RunId | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class WorkflowRunStateError(WorkflowError):
    """An operation does not apply to the run's current status (HTTP 409).

    ``code`` is ``INVALID_RUN_STATE``, or what the run waits for when that is why
    (``WAITING_FOR_APPROVAL``: resuming a run that waits at an approval gate).
    """

    code = "INVALID_RUN_STATE"
    http_status = 409

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class WorkflowStepFailedError(WorkflowError):
    """A step failed terminally; raised inside the workflow body by ``wf.do``."""

    code = "STEP_FAILED"
    http_status = 422

    def __init__(self, step: str, message: str, *, error_type: str | None = None) -> None:
        super().__init__(f"step '{step}' failed: {message}")
        self.step = step
        self.step_message = message
        self.error_type = error_type


class WorkflowInputError(WorkflowError, ValueError):
    """Input, data or output that is invalid, not JSON-serializable or over a limit.

    Also a ``ValueError``: it is a bad value given at the call.
    """

    code = "INVALID_INPUT"
    http_status = 400

    def __init__(self, message: str, *, errors: JSONValue = None) -> None:
        super().__init__(message)
        self.errors = errors


class WorkflowApprovalResolvedError(WorkflowError):
    """An approval gate was already settled (decided or expired)."""

    code = "APPROVAL_RESOLVED"
    http_status = 409


class WorkflowUnknownGateError(WorkflowError):
    """A decision names no approval gate the run has reached or its code declares.

    ``gates`` lists the reasons it does have, for callers allowed to read the run.
    """

    code = "UNKNOWN_GATE"
    http_status = 400

    def __init__(self, message: str, *, gates: list[str] | None = None) -> None:
        super().__init__(message)
        self.gates: list[str] = list(gates or ())


class WorkflowIdempotencyError(WorkflowError):
    """An idempotency key was reused with another input (HTTP 409)."""

    code = "IDEMPOTENCY_CONFLICT"
    http_status = 409

    def __init__(self, message: str, *, run_id: RunId | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class WorkflowApprovalForbiddenError(WorkflowError):
    """The gate's policy refuses this approver."""

    code = "APPROVAL_FORBIDDEN"
    http_status = 403


class WorkflowStepFunctionMismatchError(WorkflowError):
    """A queue message names a function other than the one recorded on the step."""

    code = "STEP_FUNCTION_MISMATCH"
    http_status = 409


class WorkflowDefinitionError(WorkflowError):
    """A workflow, graph or function definition is invalid (raised at declaration)."""

    code = "DEFINITION_ERROR"
    http_status = 500


class WorkflowVersionDeclinedError(WorkflowError):
    """The workflow's current version is ``declined``: it refuses new runs."""

    code = "VERSION_DECLINED"
    http_status = 409


class WorkflowForkError(WorkflowError):
    """``fork_run`` refused: nothing was written.

    ``code`` says why: ``FORK_DIVERGES`` (HTTP 409: the current code, replayed over the
    steps the fork would keep, asks for ``step_asked`` where the source recorded
    ``step_recorded``), ``FORK_UNKNOWN_STEP`` (400: ``from_step`` names no step of the
    run) or ``FORK_NOT_TERMINAL`` (409: only a completed, failed or cancelled run, or one
    suspended with ``VERSION_CONFLICT``, forks).
    """

    code = "FORK_DIVERGES"
    http_status = 409
    #: Each code's HTTP status.
    STATUSES = {"FORK_DIVERGES": 409, "FORK_UNKNOWN_STEP": 400, "FORK_NOT_TERMINAL": 409}

    def __init__(self, message: str, *, code: str = "FORK_DIVERGES",
                 run_id: RunId | None = None, step_recorded: str | None = None,
                 step_asked: str | None = None) -> None:
        super().__init__(message)
        if code not in self.STATUSES:
            raise ValueError(f"unknown fork error code {code!r}")
        self.code = code
        self.http_status = self.STATUSES[code]
        self.run_id = run_id
        self.step_recorded = step_recorded
        self.step_asked = step_asked


class WorkflowScheduleError(WorkflowError):
    """A schedule operation refused: nothing was written.

    ``code`` says why: ``SCHEDULE_NOT_FOUND`` (HTTP 404: no schedule has the name) or
    ``INVALID_SCHEDULE`` (400: the declaration or form is invalid; ``field`` names the
    field at fault when one is).
    """

    code = "INVALID_SCHEDULE"
    http_status = 400
    #: Each code's HTTP status.
    STATUSES = {"SCHEDULE_NOT_FOUND": 404, "INVALID_SCHEDULE": 400}

    def __init__(self, message: str, *, code: str = "INVALID_SCHEDULE",
                 field: str | None = None) -> None:
        super().__init__(message)
        if code not in self.STATUSES:
            raise ValueError(f"unknown schedule error code {code!r}")
        self.code = code
        self.http_status = self.STATUSES[code]
        self.field = field


class WorkflowConfigurationError(WorkflowError):
    """The ``PIKKU_WORKFLOWS`` settings are invalid."""

    code = "CONFIGURATION_ERROR"
    http_status = 500


# Control-flow signals. They derive from BaseException so that a workflow body's own
# ``except Exception`` cannot swallow a pause, a suspension or a cancellation.


class WorkflowSignal(BaseException):
    """Base of the internal signals that unwind a workflow body."""


class WorkflowPaused(WorkflowSignal):
    """The pass waits on something outside it (a queued step, a sleep, a delayed retry)."""

    def __init__(self, step: str, *, wake_at: datetime | None = None) -> None:
        super().__init__(step)
        self.step = step
        self.wake_at = wake_at


class WorkflowSuspended(WorkflowSignal):
    """The run suspends until resumed; ``error`` is what the run records."""

    def __init__(self, error: JSONObject, *,
                 recheck: Callable[[], bool] | None = None) -> None:
        super().__init__(error.get("message"))
        self.error = error
        # Called after the run is marked suspended: True if what the gate waits for
        # arrived meanwhile (a decision racing the pass), so the run must go on.
        self.recheck = recheck


class WorkflowCancelled(WorkflowSignal):
    """The body cancelled the run (``wf.cancel``)."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason


class WorkflowDeadlineExceeded(WorkflowSignal):
    """The run passed its deadline (``deadline_at``, DESIGN 8.4) at a step start: the
    pass fails it with code ``DEADLINE_EXCEEDED``."""

    def __init__(self, run_id: object, deadline_at: datetime) -> None:
        super().__init__(f"run {run_id} passed its deadline {deadline_at.isoformat()}")
        self.run_id = run_id
        self.deadline_at = deadline_at
