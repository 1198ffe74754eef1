"""The ids a log record of a run or a step carries as ``extra`` (docs/observing.md#logs):
one builder, so every record names them alike."""

from __future__ import annotations

from .types import RunId


def log_extra(run_id: RunId, *, workflow: str | None = None,
              step: str | None = None, attempt: int | None = None) -> dict[str, object]:
    """A run's ids, and a step's, as a log record's ``extra``.

    Args:
        run_id: The run's id (logged as a string).
        workflow: The run's workflow name, where the caller has it at hand.
        step: The step's key.
        attempt: The attempt's number.

    Returns:
        ``pikku_run_id``, with ``pikku_workflow``, ``pikku_step`` and ``pikku_attempt``
        for those given.
    """
    extra: dict[str, object] = {"pikku_run_id": str(run_id)}
    if workflow is not None:
        extra["pikku_workflow"] = workflow
    if step is not None:
        extra["pikku_step"] = step
    if attempt is not None:
        extra["pikku_attempt"] = attempt
    return extra
