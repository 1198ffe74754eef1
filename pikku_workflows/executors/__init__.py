"""Executors: how passes and steps reach a process (inline here, RQ on workers)."""

from __future__ import annotations

from .base import Executor


def get_executor(inline: bool) -> Executor:
    """The executor for a run started inline or not."""
    from ..exceptions import WorkflowConfigurationError
    from .inline import InlineExecutor

    if inline:
        return InlineExecutor()
    raise WorkflowConfigurationError(
        "only inline runs are available in this release: the RQ executor "
        "(PIKKU_WORKFLOWS = {'EXECUTOR': 'rq'}) is not built yet"
    )


__all__ = ["Executor", "get_executor"]
