"""Executors: how passes and steps reach a process (inline here, RQ on workers)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from .base import Executor


def get_executor(inline: bool) -> Executor:
    """The executor of a run: in this process if ``inline``, else on RQ workers."""
    if inline:
        from .inline import InlineExecutor

        return InlineExecutor()
    from .rq import RQExecutor

    return RQExecutor()


def step_dispatcher(run_inline: bool) -> Executor:
    """Where ``queued=True`` steps go: RQ, which an inline run may use when it is set up.

    Raises:
        WorkflowConfigurationError: The executor is inline (no Redis configured for it).
    """
    from ..conf import pikku_settings
    from ..exceptions import WorkflowConfigurationError
    from .rq import RQExecutor

    if run_inline and pikku_settings.EXECUTOR != "rq":
        raise WorkflowConfigurationError(
            "queued=True steps run on RQ step workers, which need "
            "PIKKU_WORKFLOWS = {'EXECUTOR': 'rq'} and RQ_QUEUES; this run is inline "
            "and no RQ executor is configured"
        )
    return RQExecutor()


def dispatch_batch() -> AbstractContextManager[None]:
    """A block whose queued-step dispatches are sent together when it ends (fan-outs)."""
    from ..conf import pikku_settings

    if pikku_settings.EXECUTOR != "rq":
        return nullcontext()
    from .rq import batched

    return batched()


__all__ = ["Executor", "dispatch_batch", "get_executor", "step_dispatcher"]
