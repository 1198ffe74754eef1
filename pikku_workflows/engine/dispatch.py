"""The dispatch port: what the engine asks of a transport, and where it finds one.

The engine (steps, the DSL context, the orchestrator, the step worker, recovery) reaches
transports only through this module; ``pikku_workflows.executors`` implements
``Executor`` and registers its executors here when the app is ready
(``PikkuWorkflowsConfig.ready``). Queue names, and whether this thread is a worker serving
a queue, are answered here too (from the registry and the settings), so that no engine
module imports an executor.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from ..conf import pikku_settings
from ..exceptions import WorkflowConfigurationError
from ..registry import registry
from ..types import RunId


class Executor(ABC):
    """Moves work to a process: an orchestrator pass, a queued step, a wake-up.

    The database rows are written before any of these is called; an executor only
    carries ids. Losing what it carried loses nothing: recovery re-drives from rows.
    """

    name: str = "base"

    @abstractmethod
    def enqueue_pass(self, run_id: RunId, *, at: datetime | None = None,
                     new_run: Any = None, workflow: str | None = None,
                     deadline: datetime | None = None) -> Any:
        """Arrange for one orchestrator pass of the run (now, or at ``at``).

        ``new_run`` is the run's row when the caller just created it (inline runs are
        created leased by their process, so that the first pass skips taking the lease);
        ``workflow``, the run's workflow name when the caller knows it; ``deadline``, when
        an inline caller stops waiting (``run_to_completion``'s timeout).
        """

    @abstractmethod
    def dispatch_step(self, run_id: RunId, step_name: str, rpc_name: str, *,
                      queue: str | None = None, timeout: float | None = None,
                      at: datetime | None = None,
                      on_sent: Callable[[], None] | None = None) -> None:
        """Arrange for a queued step to run on a step worker (its row is written; send
        after the current transaction commits, then call ``on_sent``)."""

    def accepts_step(self, rpc_name: str, queue: str | None) -> bool:
        """Whether this executor takes the queued steps of ``rpc_name`` (on ``queue``).

        False: they run inline, in the run's pass, with the same rows, attempts, retries
        and time limit (Pikku's ``dispatchStep`` returning false). Asked before the step is
        recorded as dispatched, since a job may leave only once its row has committed.
        """
        return True

    def schedule_wakeup(self, run_id: RunId, step_name: str, at: datetime, *,
                        workflow: str | None = None) -> bool:
        """Arrange for the run to continue when a sleep or retry delay ends.

        Returns:
            False to decline: the worker's pass then waits in place and carries on
            (Pikku's ``scheduleSleep`` returning false). True by default: a pass is
            enqueued for ``at``.
        """
        self.enqueue_pass(run_id, at=at, workflow=workflow)
        return True

    def retry_busy(self, run_id: RunId) -> None:  # noqa: B027 - optional hook
        """A pass found the run's lease taken: the holder drives it; nothing by default."""

    def batched(self) -> AbstractContextManager[None]:
        """A block whose dispatches are sent together when it ends (none by default)."""
        return nullcontext()

    def oldest_waiting_job(self) -> datetime | None:
        """When the oldest job still waiting in a queue was enqueued (None: no backlog,
        or the transport keeps none)."""
        return None


# --- the executors, registered at app ready ----------------------------------------------

_executors: dict[str, Executor] = {}


def register_executor(executor: Executor, name: str | None = None) -> None:
    """Make ``executor`` the one called ``name`` (default ``executor.name``: ``inline``,
    ``rq``; a custom executor is registered under its dotted path when first used)."""
    _executors[name or executor.name] = executor


def executor_named(name: str) -> Executor:
    """The executor called ``name`` (a value of the ``EXECUTOR`` setting): a registered
    one, or an instance of the ``Executor`` subclass at that dotted path, made once.

    Raises:
        WorkflowConfigurationError: No executor of that name is registered, or the path
            names no ``Executor`` subclass.
    """
    found = _executors.get(name)
    if found is not None:
        return found
    if "." in name:
        try:
            custom = import_string(name)
        except ImportError as exc:
            raise WorkflowConfigurationError(f"executor {name!r} does not import: {exc}"
                                             ) from exc
        if isinstance(custom, type) and issubclass(custom, Executor):
            with _registering:
                if name not in _executors:
                    register_executor(custom(), name)
            return _executors[name]
        raise WorkflowConfigurationError(f"executor {name!r} is not an Executor subclass")
    raise WorkflowConfigurationError(
        f"no executor named '{name}' is registered (executors register when the "
        "pikku_workflows app is ready: is it in INSTALLED_APPS?)")


_registering = threading.Lock()


def transport_configured() -> bool:
    """Whether ``EXECUTOR`` names a transport (``rq`` or a custom executor), not inline."""
    return pikku_settings.EXECUTOR != "inline"


def queued_executor() -> Executor:
    """The executor of runs that are not inline: ``EXECUTOR``'s transport (RQ when the
    setting says ``inline``: a run started with ``inline=False`` goes to RQ)."""
    return executor_named(pikku_settings.EXECUTOR if transport_configured() else "rq")


def get_executor(inline: bool) -> Executor:
    """The executor of a run: in this process if ``inline``, else its transport."""
    return executor_named("inline") if inline else queued_executor()


# How many ``queued_steps_inline()`` blocks are open (process-wide, like the settings
# override that ``testing.run_inline`` pairs it with, so a live server's threads see it).
_queued_steps_inline = 0


@contextmanager
def queued_steps_inline() -> Iterator[None]:
    """A block in which the ``queued=True`` steps of inline runs run in their pass.

    ``pikku_workflows.testing.run_inline`` opens one: a test runs the whole workflow in
    its own process, sending nothing to Redis, whatever the ``EXECUTOR`` setting says.
    """
    global _queued_steps_inline
    _queued_steps_inline += 1
    try:
        yield
    finally:
        _queued_steps_inline -= 1


def queued_step_runs_in_pass(run_inline: bool) -> bool:
    """Whether a queued step of an inline run runs in the run's pass, not on RQ: inside
    ``queued_steps_inline()`` (the step keeps its rows, attempts, retries and timeout)."""
    return run_inline and _queued_steps_inline > 0


def step_dispatcher(run_inline: bool) -> Executor:
    """Where ``queued=True`` steps go: the transport, which an inline run may use when
    one is set up.

    Raises:
        WorkflowConfigurationError: The executor is inline (no transport configured).
    """
    if run_inline and not transport_configured():
        raise WorkflowConfigurationError(
            "queued=True steps run on step workers, which need a transport: "
            "PIKKU_WORKFLOWS = {'EXECUTOR': 'rq'} and RQ_QUEUES (or a custom executor); "
            "this run is inline and no transport is configured"
        )
    return queued_executor()


def dispatch_batch() -> AbstractContextManager[None]:
    """A block whose queued-step dispatches are sent together when it ends (fan-outs)."""
    if not transport_configured():
        return nullcontext()
    return queued_executor().batched()


# --- queue names ------------------------------------------------------------------------

WAKE_SUFFIX = ".wake"


def orchestrator_queue_name(workflow: str) -> str:
    definition = registry.find_workflow(workflow)
    return (definition.queue if definition else None) or pikku_settings.ORCHESTRATOR_QUEUE


def step_queue_name(rpc_name: str) -> str:
    definition = registry.function(rpc_name)
    return (definition.queue if definition else None) or pikku_settings.STEP_WORKER_QUEUE


def wake_queue_name(orchestrator_queue: str) -> str:
    """The queue of an orchestrator queue's runs in flight, which workers serve first:
    wake-ups (sleeps and retry delays ending) and every pass but a new run's first."""
    return f"{orchestrator_queue}{WAKE_SUFFIX}"


def orchestrator_queue_names() -> list[str]:
    names = [pikku_settings.ORCHESTRATOR_QUEUE] + [
        d.queue for d in registry.workflows() if d.queue]
    return list(dict.fromkeys(names))


def all_queue_names() -> list[str]:
    """Every queue a worker should listen on: the shared ones and each dedicated one.

    Workers take jobs from their queues in order: wake-ups first, then steps, then
    passes. Work of runs in flight (a retry, a queued step) so goes before runs not
    started yet, instead of waiting behind a backlog of new runs.
    """
    names = [pikku_settings.STEP_WORKER_QUEUE]
    names += [d.queue for d in registry.functions() if d.queue]
    names += orchestrator_queue_names()
    return with_wake_queues(names)


def with_wake_queues(names: list[str]) -> list[str]:
    """``names`` with, first, the wake-up queue of each orchestrator queue among them.

    Workers take jobs from their queues in order, so a run whose sleep has ended goes
    before runs not started yet, and wake-ups stay in the order they fell due.
    """
    orchestrators = set(orchestrator_queue_names())
    wakes = [wake_queue_name(name) for name in names if name in orchestrators]
    return list(dict.fromkeys([*wakes, *names]))


# --- is this thread a worker serving a queue? ------------------------------------------

_serving = threading.local()


@contextmanager
def serving(queue_names: list[str]) -> Iterator[None]:
    """Mark this thread as a worker executing a job taken from ``queue_names``."""
    _serving.queues = frozenset(queue_names)
    try:
        yield
    finally:
        _serving.queues = frozenset()


def serves_queue(name: str) -> bool:
    """Whether this thread is a worker (running a job) that listens on queue ``name``."""
    return name in getattr(_serving, "queues", frozenset())
