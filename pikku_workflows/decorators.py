"""``@pw.function`` and ``@pw.workflow``: register plain Python functions by name."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar, overload

from .declarations import check_serializers, check_step_options
from .exceptions import WorkflowDefinitionError
from .graph.definition import GraphDefinition, build_graph
from .registry import FunctionDefinition, WorkflowDefinition, accepts_context, registry

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
        registry.register(
            FunctionDefinition(
                name=registered, fn=func, queued=queued, atomic=atomic, retries=retries,
                retry_delay=retry_delay, timeout=timeout, queue=queue,
                takes_context=accepts_context(func),
            )
        )
        func.__pikku_name__ = registered  # type: ignore[attr-defined]
        return func

    return decorate(fn) if fn is not None else decorate


@overload
def workflow(fn: F) -> F: ...
@overload
def workflow(
    fn: None = None, *, name: str | None = None, description: str = "",
    tags: tuple[str, ...] | list[str] = (), queue: str | None = None,
    input_serializer: type | None = None, output_serializer: type | None = None,
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

    Returns:
        The function itself, with ``__pikku_name__`` set.

    Raises:
        WorkflowDefinitionError: The name is empty, taken or holds control characters or
            ``/``; the function is ``async def``; a serializer is not a class.
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
