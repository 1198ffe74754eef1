"""The registry: step functions and workflow definitions, by name."""

from __future__ import annotations

import inspect
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Protocol

from .analysis import WorkflowAnalysis, analyse_workflow
from .exceptions import WorkflowDefinitionError, WorkflowNotFoundError
from .status import WorkflowSource

#: The longest workflow or function name (the ``workflow`` and ``rpc_name`` columns).
NAME_MAX_LENGTH = 200


def _qualified(fn: Callable[..., object]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _accepts_context(fn: Callable[..., object]) -> bool:
    """True if ``fn`` takes a second positional parameter (the StepContext)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


@dataclass(frozen=True)
class FunctionDefinition:
    """A registered step function and its defaults."""

    name: str
    fn: Callable[..., object]
    queued: bool = False
    atomic: bool = False
    retries: int | None = None
    retry_delay: float | int | str | None = None
    timeout: float | int | str | None = None
    queue: str | None = None
    takes_context: bool = False
    # Named step limits of PIKKU_WORKFLOWS["LIMITS"] every attempt of the function holds.
    limits: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        return _qualified(self.fn)

    kind = "function"


@dataclass(frozen=True)
class WorkflowDefinition:
    """A registered DSL workflow: a Python function ``fn(wf, data)`` replayed from the top."""

    name: str
    fn: Callable[..., object]
    description: str = ""
    tags: tuple[str, ...] = ()
    queue: str | None = None
    input_serializer: type | None = None
    output_serializer: type | None = None
    source: str = WorkflowSource.DSL
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    kind = "workflow"

    @property
    def origin(self) -> str:
        return _qualified(self.fn)

    @cached_property
    def analysis(self) -> WorkflowAnalysis:
        """The static analysis of the body (step graph, hash); computed once."""
        return analyse_workflow(self.fn)

    @property
    def graph_hash(self) -> str:
        return self.analysis.graph_hash


class WorkflowLike(Protocol):
    """A registered workflow: a ``WorkflowDefinition`` or a ``graph.GraphDefinition``.

    A protocol because the graph layer sits above this module.
    """

    # Read-only properties: both definitions are frozen dataclasses.
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def fn(self) -> Callable[..., object] | None: ...
    @property
    def description(self) -> str: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    @property
    def input_serializer(self) -> type | None: ...
    @property
    def output_serializer(self) -> type | None: ...
    @property
    def extra(self) -> dict[str, object]: ...
    @property
    def graph_hash(self) -> str: ...
    @property
    def analysis(self) -> WorkflowAnalysis: ...


Definition = FunctionDefinition | WorkflowLike


def _name_problem(name: str) -> str | None:
    """What makes ``name`` unusable in URLs, logs and the admin, or None."""
    if "/" in name:
        # Names are path segments of the REST API (workflows/{name}/).
        return "'/'"
    # isprintable() is a fast test that rules out both categories for most names.
    if not name.isprintable() and any(
            unicodedata.category(char) in ("Cc", "Cs") for char in name):
        return "control characters or lone surrogates"
    return None


@dataclass(frozen=True)
class ScheduleDefinition:
    """A schedule declared in code (``pikku_workflows.schedule``), validated; synced to a
    ``WorkflowSchedule`` row (``source=code``) by ``sync_schedules``.

    ``every`` and ``catchup`` are seconds; ``start_at``/``end_at`` are UTC.
    """

    name: str
    workflow: str
    cron: str
    every: float | None
    tz: str
    input: object
    overlap: str
    catchup: float
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    origin: str = ""


class Registry:
    """Functions and workflows share one namespace, so ``wf.do`` can resolve either."""

    def __init__(self) -> None:
        self._entries: dict[str, Definition] = {}
        self._schedules: dict[str, ScheduleDefinition] = {}

    def register_schedule(self, definition: ScheduleDefinition) -> ScheduleDefinition:
        """Add a declared schedule; another declaration under a taken name is an error."""
        existing = self._schedules.get(definition.name)
        if existing is not None and existing.origin != definition.origin:
            raise WorkflowDefinitionError(
                f"cannot declare schedule '{definition.name}' in {definition.origin}: it is "
                f"already declared in {existing.origin}")
        self._schedules[definition.name] = definition
        return definition

    def unregister_schedule(self, name: str) -> None:
        self._schedules.pop(name, None)

    def schedules(self) -> list[ScheduleDefinition]:
        """The declared schedules, by name."""
        return sorted(self._schedules.values(), key=lambda d: d.name)

    def register(self, definition: Definition) -> Definition:
        """Add a definition; a different object under a taken name is an error."""
        name = definition.name
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX_LENGTH:
            raise WorkflowDefinitionError(
                f"cannot register {definition.kind} {definition.origin} as {name!r}: a name "
                f"must be a non-empty string of at most {NAME_MAX_LENGTH} characters")
        problem = _name_problem(name)
        if problem:
            raise WorkflowDefinitionError(
                f"cannot register {definition.kind} {definition.origin} as {name!r}: a name "
                f"must not contain {problem}")
        existing = self._entries.get(definition.name)
        if existing is not None and existing.origin != definition.origin:
            raise WorkflowDefinitionError(
                f"cannot register {definition.kind} {definition.origin} as "
                f"'{definition.name}': that name is already the {existing.kind} "
                f"{existing.origin}"
            )
        # The same origin again is a module re-import (autoreload, tests): replace it.
        self._entries[definition.name] = definition
        return definition

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def function(self, name: str) -> FunctionDefinition | None:
        """The step function registered as ``name``; None for anything else (any type)."""
        entry = self._entries.get(name) if isinstance(name, str) else None
        return entry if isinstance(entry, FunctionDefinition) else None

    def workflow(self, name: str) -> WorkflowLike:
        """Return the workflow (DSL or graph) named ``name``.

        Raises:
            WorkflowNotFoundError: No workflow has that name.
        """
        entry = self.find_workflow(name)
        if entry is None:
            shown = name if isinstance(name, str) else repr(name)
            if len(shown) > NAME_MAX_LENGTH:
                shown = shown[:NAME_MAX_LENGTH] + "..."
            raise WorkflowNotFoundError(f"no workflow is registered as '{shown}'")
        return entry

    def find_workflow(self, name: str) -> WorkflowLike | None:
        """The workflow registered as ``name``; None for anything else (any type)."""
        entry = self._entries.get(name) if isinstance(name, str) else None
        return entry if entry is not None and not isinstance(entry, FunctionDefinition) \
            else None

    def workflows(self) -> list[WorkflowLike]:
        return sorted(
            (e for e in self._entries.values() if not isinstance(e, FunctionDefinition)),
            key=lambda d: d.name,
        )

    def functions(self) -> list[FunctionDefinition]:
        return sorted(
            (e for e in self._entries.values() if isinstance(e, FunctionDefinition)),
            key=lambda d: d.name,
        )

    @contextmanager
    def isolated(self) -> Iterator[Registry]:
        """Restore the registry's content on exit (for tests that register on the fly)."""
        saved = dict(self._entries)
        saved_schedules = dict(self._schedules)
        try:
            yield self
        finally:
            self._entries = saved
            self._schedules = saved_schedules


registry = Registry()


def registered_name(fn: Callable[..., object]) -> str | None:
    """The name ``fn`` is registered under as a step function, if it is."""
    name = getattr(fn, "__pikku_name__", None)
    if name is None:
        return None
    entry = registry.function(name)
    return name if entry is not None and entry.fn is fn else None


def accepts_context(fn: Callable[..., object]) -> bool:
    return _accepts_context(fn)
