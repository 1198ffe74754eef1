"""Executors: how passes and steps reach a process (inline here, RQ on workers).

They implement the engine's dispatch port (``pikku_workflows.engine.dispatch``) and
register there when the app is ready; the engine never imports this package.
"""

from __future__ import annotations

from ..engine.dispatch import register_executor
from .inline import InlineExecutor
from .rq import RQExecutor


def register_executors() -> None:
    """Register the inline and RQ executors with the dispatch port (at app ready)."""
    register_executor(InlineExecutor())
    register_executor(RQExecutor())


__all__ = ["register_executors"]
