"""``@pw.function`` and ``@pw.workflow``: register plain Python functions by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from .durations import parse_duration
from .exceptions import WorkflowDefinitionError
from .graph.definition import GraphDefinition, build_graph
from .registry import FunctionDefinition, WorkflowDefinition, accepts_context, registry

F = TypeVar("F", bound=Callable[..., object])


def _check_name(name: object, fn: Callable[..., object]) -> str:
    if not isinstance(name, str) or not name.strip():
        raise WorkflowDefinitionError(f"the name of {fn!r} must be a non-empty string")
    return name


def _check_serializers(owner: str, **serializers: object) -> None:
    for role, value in serializers.items():
        if value is not None and not isinstance(value, type):
            raise WorkflowDefinitionError(
                f"{owner}: {role} must be a serializer class (such as a DRF Serializer "
                f"subclass), not {value!r}")


def _check_options(owner: str, retries: object, retry_delay: float | str | None,
                   timeout: float | str | None) -> None:
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                or retries < 0):
        raise WorkflowDefinitionError(f"{owner}: retries must be an int >= 0, not {retries!r}")
    try:
        if retry_delay is not None and retry_delay != "exponential":
            parse_duration(retry_delay, what="retry_delay")
        if timeout is not None:
            parse_duration(timeout, what="timeout")
    except ValueError as exc:
        raise WorkflowDefinitionError(f"{owner}: {exc}") from exc


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
        WorkflowDefinitionError: The name is taken or an option is invalid.
    """

    def decorate(func: F) -> F:
        registered = _check_name(name or func.__name__, func)
        _check_options(f"function '{registered}'", retries, retry_delay, timeout)
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
    """

    def decorate(func: F) -> F:
        registered = _check_name(name or func.__name__, func)
        _check_serializers(f"workflow '{registered}'", input_serializer=input_serializer,
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


def graph_workflow(
    name: str,
    nodes: dict[str, str],
    config: dict[str, dict[str, Any]] | None = None,
    *,
    description: str = "",
    tags: tuple[str, ...] | list[str] = (),
    entry: str | list[str] | None = None,
    output: str | None = None,
    queue: str | None = None,
    input_serializer: type | None = None,
    output_serializer: type | None = None,
) -> GraphDefinition:
    """Register a graph workflow: declared nodes and the edges between them.

    Args:
        name: The registered workflow name.
        nodes: ``{node_id: function_name}``; a name that is a workflow runs it as a child.
        config: Per node: ``next`` (a node, a list run in parallel, or
            ``{branch_key: node or [nodes]}`` followed after ``ctx.branch(key)``),
            ``input`` (literals, ``ref(...)``, ``template(...)``), ``for_each`` (a ref to a
            list), ``mode`` (``"parallel"`` or ``"sequential"``), ``on_error``,
            ``retries``, ``retry_delay``, ``notes``.
        description: Shown in the API and the admin.
        tags: Free labels.
        entry: The entry node(s) (default: the nodes no edge points to).
        output: The node whose result is the run's output (default: the results of the
            nodes that ran last).
        queue: A dedicated RQ orchestrator queue for this workflow's runs.
        input_serializer: A DRF serializer class validating the run input.
        output_serializer: A DRF serializer class validating the run output.

    Returns:
        The ``GraphDefinition``.

    Raises:
        WorkflowDefinitionError: The declaration is invalid (the message names the node).
    """
    _check_serializers(f"graph workflow '{name}'", input_serializer=input_serializer,
                       output_serializer=output_serializer)
    definition = build_graph(name, nodes, config, description=description, tags=tags,
                             entry=entry, output=output, queue=queue,
                             input_serializer=input_serializer,
                             output_serializer=output_serializer)
    registry.register(definition)
    return definition
