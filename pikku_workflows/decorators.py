"""``@pw.function``, ``@pw.workflow`` and ``pw.schedule``: register definitions by name."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, overload

from .conf import LIMIT_NAME_MAX
from .declarations import Concurrency, check_serializers, check_step_options, flow_options
from .exceptions import WorkflowDefinitionError
from .graph.definition import GraphDefinition, build_graph
from .registry import (
    FunctionDefinition,
    ScheduleDefinition,
    WorkflowDefinition,
    accepts_context,
    registry,
)
from .runtime.scheduler import validate_schedule

F = TypeVar("F", bound=Callable[..., object])
P = ParamSpec("P")


def _check_name(name: object, fn: Callable[..., object]) -> str:
    # The registry refuses control characters and '/' (for every kind of definition).
    if not isinstance(name, str) or not name.strip():
        raise WorkflowDefinitionError(
            f"the name of {fn!r} must be a non-empty string, not {name!r}")
    return name


@overload
def function(fn: F) -> F: ...
@overload
def function(
    fn: None = None, *, name: str | None = None, queued: bool = False, atomic: bool = False,
    retries: int | None = None, retry_delay: float | str | None = None,
    timeout: float | str | None = None, queue: str | None = None,
    limits: list[str] | tuple[str, ...] = (),
) -> Callable[[F], F]: ...


def function(
    fn: F | None = None,
    *,
    name: str | None = None,
    queued: bool = False,
    atomic: bool = False,
    retries: int | None = None,
    retry_delay: float | str | None = None,
    timeout: float | str | None = None,
    queue: str | None = None,
    limits: list[str] | tuple[str, ...] = (),
) -> F | Callable[[F], F]:
    """Register a step function, usable as ``@function`` or ``@function(...)``.

    Args:
        fn: The function, ``fn(data)`` or ``fn(data, ctx)`` with a ``StepContext``.
        name: The registered name (default: the function's ``__name__``).
        queued: Run on an RQ step worker instead of inside the orchestrator.
        atomic: Commit the function's own ORM writes and the step's result together.
        retries: Extra attempts after the first (default: ``DEFAULT_RETRIES``).
        retry_delay: A duration between attempts, or ``"exponential"``.
        timeout: The longest one attempt may take.
        queue: A dedicated RQ queue for this function's steps.
        limits: Names of ``PIKKU_WORKFLOWS["LIMITS"]`` each attempt holds (concurrency
            and rate across all workers); a step waits ``scheduled`` for them.

    Returns:
        The function itself, with ``__pikku_name__`` set.

    Raises:
        WorkflowDefinitionError: The name is empty, taken or holds control characters or
            ``/``, or an option is invalid.
    """

    def decorate(func: F) -> F:
        registered = _check_name(func.__name__ if name is None else name, func)
        check_step_options(f"function '{registered}'", retries=retries,
                           retry_delay=retry_delay, timeout=timeout)
        names = _limit_names(registered, limits)
        registry.register(
            FunctionDefinition(
                name=registered, fn=func, queued=queued, atomic=atomic, retries=retries,
                retry_delay=retry_delay, timeout=timeout, queue=queue,
                takes_context=accepts_context(func), limits=names,
            )
        )
        func.__pikku_name__ = registered  # type: ignore[attr-defined]
        return func

    return decorate(fn) if fn is not None else decorate


def _limit_names(function_name: str, limits: object) -> tuple[str, ...]:
    """``limits`` as a tuple of names, in a stable order (whether ``LIMITS`` declares
    them is the system check's: settings may not be loaded at import time)."""
    if isinstance(limits, str) or not isinstance(limits, list | tuple) or not all(
            isinstance(name, str) and name and len(name) <= LIMIT_NAME_MAX for name in limits):
        raise WorkflowDefinitionError(
            f"function '{function_name}': limits must be a list of limit names (non-empty "
            f"strings of at most {LIMIT_NAME_MAX} characters), not {limits!r}")
    return tuple(sorted(set(limits)))


@overload
def workflow(fn: F) -> F: ...
@overload
def workflow(
    fn: None = None, *, name: str | None = None, description: str = "",
    tags: tuple[str, ...] | list[str] = (), queue: str | None = None,
    input_serializer: type | None = None, output_serializer: type | None = None,
    concurrency: Concurrency | None = None, timeout: float | str | None = None,
) -> Callable[[F], F]: ...


def workflow(
    fn: F | None = None,
    *,
    name: str | None = None,
    description: str = "",
    tags: tuple[str, ...] | list[str] = (),
    queue: str | None = None,
    input_serializer: type | None = None,
    output_serializer: type | None = None,
    concurrency: Concurrency | None = None,
    timeout: float | str | None = None,
) -> F | Callable[[F], F]:
    """Register a DSL workflow ``fn(wf, data)``, usable as ``@workflow`` or ``@workflow(...)``.

    Args:
        fn: The workflow body. It is replayed from the top on every pass, so step
            names and the order of calls must depend only on the input and on
            earlier step results.
        name: The registered name (default: the function's ``__name__``).
        description: Shown in the API and the admin (default: the docstring).
        tags: Free labels for listing and filtering.
        queue: A dedicated RQ orchestrator queue for this workflow's runs.
        input_serializer: A DRF serializer class validating the run input.
        output_serializer: A DRF serializer class validating the output.
        concurrency: A ``Concurrency(max, key, on_full)``: at most ``max`` runs per key
            hold a slot at once (docs/flow-control.md).
        timeout: A run unfinished this long after it starts fails ``DEADLINE_EXCEEDED``
            (seconds or a duration string; a start's ``run_timeout`` overrides it).

    Returns:
        The function itself, with ``__pikku_name__`` set.

    Raises:
        WorkflowDefinitionError: The name is empty, taken or holds control characters or
            ``/``; the function is ``async def``; a serializer is not a class; the
            concurrency is not a ``Concurrency`` or the timeout not a positive duration.
    """

    def decorate(func: F) -> F:
        registered = _check_name(func.__name__ if name is None else name, func)
        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
            # A body is replayed synchronously, step by step; its steps may be async.
            raise WorkflowDefinitionError(
                f"workflow '{registered}' ({func.__qualname__}) is an async def function: "
                "a workflow body must be a plain def (its step functions and closures "
                "may be async def)")
        check_serializers(f"workflow '{registered}'", input_serializer=input_serializer,
                           output_serializer=output_serializer)
        registry.register(
            WorkflowDefinition(
                name=registered, fn=func,
                description=description or (func.__doc__ or "").strip().split("\n")[0],
                tags=tuple(tags), queue=queue, input_serializer=input_serializer,
                output_serializer=output_serializer,
                extra=flow_options(f"workflow '{registered}'", concurrency, timeout),
            )
        )
        func.__pikku_name__ = registered  # type: ignore[attr-defined]
        return func

    return decorate(fn) if fn is not None else decorate


def _registering(build: Callable[P, GraphDefinition]) -> Callable[P, GraphDefinition]:
    """``build``, registering the definition it returns (one signature, declared once)."""

    @functools.wraps(build)
    def register(*args: P.args, **kwargs: P.kwargs) -> GraphDefinition:
        definition = build(*args, **kwargs)
        registry.register(definition)
        return definition

    return register


graph_workflow = _registering(build_graph)
graph_workflow.__name__ = graph_workflow.__qualname__ = "graph_workflow"
graph_workflow.__doc__ = """Register a graph workflow: declared nodes and the edges between them.

Takes the arguments of ``pikku_workflows.graph.definition.build_graph`` (documented there
and in the Python API reference) and returns the registered ``GraphDefinition``.

Raises:
    WorkflowDefinitionError: The declaration is invalid (the message names the node), or
        the name is taken.
"""


def schedule(
    name: str,
    workflow: str | Callable[..., object],
    *,
    cron: str | None = None,
    every: float | int | str | None = None,
    tz: str = "UTC",
    input: Any = None,
    overlap: str = "skip",
    catchup: float | int | str = "0s",
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    paused: bool = False,
) -> ScheduleDefinition:
    """Declare a schedule (in a ``workflows.py``, after its workflow): runs of
    ``workflow`` at the instants of ``cron`` in ``tz``, or every ``every``.

    The declaration is synced to a ``WorkflowSchedule`` row (``source=code``) when
    ``pikku_worker`` or ``pikku_scheduler`` starts (``sync_schedules``).

    Args:
        name: The schedule's unique name (at most 150 characters, no '/').
        workflow: A registered workflow (its name or the decorated function).
        cron: A 5-field cron expression, in ``tz``. Exactly one of ``cron`` and ``every``.
        every: A duration of at least one second: ticks fall at ``start_at`` (default the
            Unix epoch) + k x ``every``.
        tz: An IANA time zone name for ``cron``.
        input: Each run's input (checked by the workflow's input serializer now).
        overlap: ``skip``, ``buffer_one``, ``allow`` or ``cancel_previous``.
        catchup: How late (beyond one minute) a tick may still start after a scheduler
            outage; older ticks are recorded ``missed``.
        start_at: No tick before it (aware datetime).
        end_at: No tick after it (aware datetime, after ``start_at``).
        paused: Created paused (an operator resumes it).

    Returns:
        The declaration.

    Raises:
        WorkflowScheduleError: ``INVALID_SCHEDULE`` naming the field at fault; nothing is
            registered.
        WorkflowDefinitionError: Another module already declares a schedule ``name``.
    """
    definition = validate_schedule(
        name=name, workflow=workflow, cron=cron, every=every, tz=tz, input=input,
        overlap=overlap, catchup=catchup, start_at=start_at, end_at=end_at, paused=paused,
        origin=_declaring_module())
    return registry.register_schedule(definition)


def _declaring_module() -> str:
    """The module that called ``schedule`` (re-imports of it replace its declarations)."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    return str(caller.f_globals.get("__name__", "?")) if caller is not None else "?"
