"""OpenTelemetry's SDK for the tracing tests: where finished spans go, as plain dicts.

In the test's process, an ``InMemorySpanExporter`` on the global tracer provider (set
once per process: OpenTelemetry allows one). In ``pikku_worker`` subprocesses, a file:
``tests.settings`` calls ``export_to_file`` when ``PIKKU_TEST_SPAN_FILE`` is set, and each
span is appended to it as one JSON line when it ends (a simple, synchronous processor:
nothing waits in a buffer when the worker is stopped), which the test reads back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_memory: InMemorySpanExporter | None = None


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare of a span (ids as hex, as in a traceparent)."""
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "links": [f"{link.context.trace_id:032x}-{link.context.span_id:016x}"
                  for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [(event.name, dict(event.attributes or {})) for event in span.events],
    }


class FileSpanExporter(SpanExporter):
    """Appends each finished span to a file, one JSON line (``as_dict``) per span."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(as_dict(span)) + "\n" for span in spans)
        # One write in append mode: the lines of several workers do not interleave.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def export_to_file(path: str) -> None:
    """This process's spans go to ``path`` (a worker subprocess's settings call it)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    trace.set_tracer_provider(provider)


def read_file(path: Path) -> list[dict[str, Any]]:
    """The spans the workers wrote to ``path``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def memory_exporter() -> InMemorySpanExporter:
    """The test process's exporter (installed on first use), emptied."""
    global _memory
    if _memory is None:
        _memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_memory))
        trace.set_tracer_provider(provider)
    _memory.clear()
    return _memory


def finished(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    """The spans finished so far, in the order they ended."""
    return [as_dict(span) for span in exporter.get_finished_spans()]
