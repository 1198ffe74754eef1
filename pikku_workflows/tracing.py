"""Optional OpenTelemetry traces of passes and steps (``pip install 'pikku-workflows[otel]'``).

Enable with ``PIKKU_WORKFLOWS = {"TRACING": True}`` in the settings of every process that
starts or runs workflows (web and ``pikku_worker``): at startup the app installs the
tracer below into the engine's hook points (``engine.trace_hooks``), so the engine itself
never imports OpenTelemetry. This module needs only ``opentelemetry-api``; the project
configures the SDK and its exporter (an OTLP exporter to Jaeger or Tempo: docs/observing.md).

What is traced:

- A new run keeps the W3C trace context (``traceparent``, ``tracestate``) of the code
  that starts it in ``WorkflowRun.trace_context``; a child run keeps its parent's pass.
- Each pass is a span of its own, ``pikku.pass <workflow>``, the root of a trace,
  LINKED to the run's stored context: a run that sleeps for days is many short traces,
  never one span left open.
- Each step attempt that executes is a span ``pikku.step <step>``: in a pass, a child of
  the pass's span; on a step worker (a ``queued`` step), a root linked to the run's
  stored context. Attributes ``pikku.run_id``, ``pikku.workflow``, ``pikku.step``,
  ``pikku.function``, ``pikku.attempt``, ``pikku.invocation_id``, ``pikku.queued`` and
  ``pikku.outcome`` (``succeeded``, ``retried``, ``failed``, ``interrupted``, ``stale``);
  a failed attempt has the error status and an ``exception`` event.
- A step a pass replays (already recorded) is an event ``pikku.step.replayed`` of the
  pass's span, not a span; a sleep is an event ``pikku.sleep``, a wait for an event, a
  message, a resume or an approval an event ``pikku.wait``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from datetime import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from .engine import trace_hooks
from .engine.steps import invocation_id
from .models import WorkflowRun, WorkflowStep

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer

MISSING = ("PIKKU_WORKFLOWS['TRACING'] needs opentelemetry-api: "
           "pip install 'pikku-workflows[otel]' (or opentelemetry-api>=1.20)")
#: The instrumentation scope of the spans.
SCOPE = "pikku_workflows"

# The pass span of the pass under way in this context (the events go to it).
_pass_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "pikku_pass_span", default=None)


def _api() -> ModuleType:
    try:
        from opentelemetry import trace
    except ImportError:
        raise ImproperlyConfigured(MISSING) from None
    return trace


class _OpenSpan:
    """A pass or step span the engine started, current until ``end``."""

    def __init__(self, span: Span, *, is_pass: bool) -> None:
        from opentelemetry import context, trace

        self.span = span
        self.token = context.attach(trace.set_span_in_context(span))
        self.pass_token = _pass_span.set(span) if is_pass else None

    def end(self, outcome: str, error: Mapping[str, Any] | None = None) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        span = self.span
        if span.is_recording():
            span.set_attribute("pikku.outcome", outcome)
            if error is not None or outcome in ("failed", "retried", "interrupted", "error"):
                message = str((error or {}).get("message") or outcome)
                span.set_status(Status(StatusCode.ERROR, message))
                if error is not None:
                    span.add_event("exception", {
                        "exception.type": str(error.get("type") or "Exception"),
                        "exception.message": message})
        if self.pass_token is not None:
            _pass_span.reset(self.pass_token)
        context.detach(self.token)
        span.end()


class OpenTelemetryTracer:
    """The engine's tracer (``engine.trace_hooks.Tracer``) on the OpenTelemetry API."""

    def __init__(self) -> None:
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self.tracer: Tracer = _api().get_tracer(SCOPE)
        # Always W3C trace context on the run, whatever propagator the project sets.
        self.propagator = TraceContextTextMapPropagator()

    def start_context(self) -> dict[str, str] | None:
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier)
        return carrier or None

    def _links(self, trace_context: object) -> list[Link]:
        from opentelemetry.trace import Link, get_current_span

        if not isinstance(trace_context, dict):
            return []
        started_from = get_current_span(self.propagator.extract(trace_context))
        span_context = started_from.get_span_context()
        return [Link(span_context, {"pikku.link": "run start"})] if span_context.is_valid \
            else []

    def _root(self, name: str, trace_context: object, attributes: dict[str, Any]) -> Span:
        from opentelemetry.context import Context

        empty: Context = Context()  # no parent: a trace of its own
        return self.tracer.start_span(name, context=empty, links=self._links(trace_context),
                                      attributes=attributes)

    def pass_span(self, run: WorkflowRun) -> _OpenSpan:
        workflow, trace_context = _run_fields(run)
        span = self._root(f"pikku.pass {workflow}", trace_context,
                          {"pikku.run_id": str(run.pk), "pikku.workflow": workflow})
        return _OpenSpan(span, is_pass=True)

    def step_span(self, run: WorkflowRun, step: WorkflowStep, attempt: int, *,
                  queued: bool) -> _OpenSpan:
        workflow, trace_context = _run_fields(run)
        attributes: dict[str, Any] = {
            "pikku.run_id": str(run.pk), "pikku.workflow": workflow,
            "pikku.step": step.step_name, "pikku.function": step.rpc_name or "inline",
            "pikku.attempt": attempt, "pikku.queued": queued,
            "pikku.invocation_id": invocation_id(run.pk, step.step_name)}
        name = f"pikku.step {step.step_name}"
        if queued:
            span = self._root(name, trace_context, attributes)
        else:
            span = self.tracer.start_span(name, attributes=attributes)  # the pass's child
        return _OpenSpan(span, is_pass=False)

    def replayed(self, step: WorkflowStep) -> None:
        span = _pass_span.get()
        if span is not None:
            span.add_event("pikku.step.replayed", {
                "pikku.step": step.step_name, "pikku.function": step.rpc_name or ""})

    def waiting(self, kind: str, step_key: str, until: datetime | None,
                attributes: Mapping[str, trace_hooks.AttributeValue]) -> None:
        span = _pass_span.get()
        if span is None:
            return
        event: dict[str, trace_hooks.AttributeValue] = {"pikku.step": step_key}
        if kind != "sleep":
            event["pikku.wait.kind"] = kind
        if until is not None:
            event["pikku.until"] = until.isoformat()
        event.update({f"pikku.wait.{name}": value for name, value in attributes.items()})
        span.add_event("pikku.sleep" if kind == "sleep" else "pikku.wait", event)


def _run_fields(run: WorkflowRun) -> tuple[str, object]:
    """The run's workflow and stored context (read when the row lacks them: a step
    worker's claim loads only a few of the run's fields)."""
    if {"workflow", "trace_context"} & run.get_deferred_fields():
        row = WorkflowRun.objects.filter(pk=run.pk).values_list(
            "workflow", "trace_context").first()
        return row if row is not None else ("", None)
    return run.workflow, run.trace_context


def install() -> None:
    """Install the OpenTelemetry tracer into the engine's hook points (idempotent).

    Raises:
        ImproperlyConfigured: opentelemetry-api is not installed.
    """
    if not installed():
        trace_hooks.install_tracer(OpenTelemetryTracer())


def uninstall() -> None:
    """Turn tracing off in this process."""
    if installed():
        trace_hooks.install_tracer(None)


def installed() -> bool:
    """Whether this process traces runs."""
    return isinstance(trace_hooks.current, OpenTelemetryTracer)
