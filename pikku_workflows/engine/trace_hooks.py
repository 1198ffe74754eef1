"""The engine's tracing hook points: no-ops until ``pikku_workflows.tracing`` installs a tracer.

The engine calls them where a pass, an executed step attempt, a replayed step or a wait
happens, after one check (``trace_hooks.current is not None``), so tracing costs one
attribute read while it is off, and the engine never imports OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..models import WorkflowRun, WorkflowStep

#: Attribute values a wait reports (OpenTelemetry's primitive attribute types).
AttributeValue = str | int | float | bool


class OpenSpan(Protocol):
    """A span the engine started (a pass or a step attempt); ``end`` closes it."""

    def end(self, outcome: str, error: Mapping[str, Any] | None = None) -> None:
        """Close the span: ``outcome`` says how it ended, ``error`` why it failed."""


class Tracer(Protocol):
    """What the engine tells a tracer (``pikku_workflows.tracing.OpenTelemetryTracer``)."""

    def start_context(self) -> dict[str, str] | None:
        """The caller's trace context (W3C ``traceparent``/``tracestate``) a new run keeps."""

    def pass_span(self, run: WorkflowRun) -> OpenSpan:
        """A pass of ``run`` begins (the span is current until it ends)."""

    def step_span(self, run: WorkflowRun, step: WorkflowStep, attempt: int, *,
                  queued: bool) -> OpenSpan:
        """An attempt of ``step`` is about to execute (in a pass, or on a step worker)."""

    def replayed(self, step: WorkflowStep) -> None:
        """A pass found ``step`` already succeeded and returned its recorded result."""

    def waiting(self, kind: str, step_key: str, until: datetime | None,
                attributes: Mapping[str, AttributeValue]) -> None:
        """A pass stops at a sleep (``kind`` ``"sleep"``) or a wait (``"event"``,
        ``"message"``, ``"suspend"``, ``"approval"``) until ``until`` (None: no limit)."""


#: The tracer in force; None: tracing is off.
current: Tracer | None = None


def install_tracer(tracer: Tracer | None) -> Tracer | None:
    """Make ``tracer`` the one the engine calls (None: off); returns the previous one."""
    global current
    previous, current = current, tracer
    return previous
