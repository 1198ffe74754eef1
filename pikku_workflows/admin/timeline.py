"""The run page's timeline: one lane per step, its attempts and waits on a time axis whose
long idle stretches are cut out and marked with a break, as server-rendered SVG."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import F, Min
from django.utils import timezone
from django.utils.html import escape

from ..engine.summary import is_graph_run, step_kind
from ..models import StepAttempt, WorkflowRun, WorkflowStep
from ..status import StepKind, StepStatus
from ..step_keys import public_step_name, step_label

#: Lanes on one page of the timeline (``?lanes=2`` for the next ones).
LANES_PER_PAGE = 100
#: The query parameter of the lane page.
PAGE_PARAMETER = "lanes"
LANE_H, BAR_H, LABEL_W, WIDTH, AXIS_H, LEGEND_H = 20, 12, 220, 960, 46, 22
PLOT_W = WIDTH - LABEL_W - 16
#: The width a cut-out idle stretch takes on the axis.
BREAK_W = 26
#: A gap between moments is cut out when it is longer than this many times the rest of
#: the drawn span together (and than ``MIN_BREAK_SECONDS``): a 3-day sleep between two
#: seconds of work, not an exponential backoff's doubling delays.
BREAK_RATIO = 2.0
MIN_BREAK_SECONDS = 1.0

#: The waits, as the legend names them: (kind, legend text).
WAITS = (("worker", "waiting for a worker"), ("retry", "retry delay"), ("sleep", "sleep"),
         ("approval", "approval"), ("suspend", "suspended (resume)"),
         ("event", "waiting for an event"), ("message", "waiting for a message"))
_ATTEMPT_STATES = (("succeeded", "attempt succeeded"), ("failed", "attempt failed"),
                   ("running", "attempt running"))
#: Tick steps in seconds, with their unit's size and name.
_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120,
          300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"), (0.001, "ms"))


@dataclass
class Segment:
    """One drawn interval of a lane: an attempt (``attempt`` set) or a wait (``wait``)."""

    start: datetime
    end: datetime
    css: str
    title: str
    attempt: int | None = None
    wait: str | None = None


@dataclass
class Lane:
    """One step: its name, label and what happened on it, in time order."""

    name: str
    label: str
    status: str
    first: datetime
    segments: list[Segment] = field(default_factory=list)


@dataclass
class Axis:
    """Time to x: linear pieces between consecutive moments, cut-out gaps ``BREAK_W`` wide."""

    times: list[datetime]
    xs: list[float]
    breaks: list[tuple[datetime, datetime]]

    def x(self, moment: datetime) -> float:
        """The x of ``moment`` (clamped to the drawn span)."""
        times, xs = self.times, self.xs
        if moment <= times[0]:
            return xs[0]
        if moment >= times[-1]:
            return xs[-1]
        i = bisect.bisect_right(times, moment) - 1
        span = (times[i + 1] - times[i]).total_seconds()
        share = (moment - times[i]).total_seconds() / span if span else 0.0
        return xs[i] + share * (xs[i + 1] - xs[i])

    def in_break(self, moment: datetime) -> bool:
        """Whether ``moment`` falls inside a cut-out gap."""
        return any(start < moment < end for start, end in self.breaks)


def make_axis(moments: list[datetime], left: float = LABEL_W,
              width: float = PLOT_W) -> Axis:
    """The axis over ``moments``: gaps longer than ``BREAK_RATIO`` times the rest of the
    drawn span (and than ``MIN_BREAK_SECONDS``) are cut out, the longest first.

    Args:
        moments: Every moment drawn (at least one).
        left: The x of the first moment.
        width: The width of the whole axis.

    Returns:
        The axis.
    """
    times = sorted(set(moments))
    if len(times) == 1:
        return Axis(times=times * 2, xs=[left, left + width], breaks=[])
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    cut: set[int] = set()
    for i in sorted(range(len(gaps)), key=gaps.__getitem__, reverse=True):
        rest = sum(g for j, g in enumerate(gaps) if j not in cut and j != i)
        if gaps[i] > MIN_BREAK_SECONDS and gaps[i] > BREAK_RATIO * rest:
            cut.add(i)
        else:
            break
    linear = sum(g for j, g in enumerate(gaps) if j not in cut)
    linear_w = width - BREAK_W * len(cut)
    xs = [left]
    for j, gap in enumerate(gaps):
        step = BREAK_W if j in cut else (gap / linear * linear_w if linear else
                                         linear_w / (len(gaps) - len(cut)))
        xs.append(xs[-1] + step)
    breaks = [(times[j], times[j + 1]) for j in sorted(cut)]
    return Axis(times=times, xs=xs, breaks=breaks)


def format_duration(seconds: float, precision: float = 0.001) -> str:
    """``seconds`` as an operator reads it: ``250 ms``, ``1.5 s``, ``1 min 30 s``, ``3 d``.

    Args:
        seconds: A duration (not negative).
        precision: The smallest step worth showing, in seconds (units below it are left
            out from a minute on).

    Returns:
        The text, ``0`` for no time.
    """
    millis = round(seconds * 1000)
    if millis == 0:
        return "0"
    if millis < 1000:
        return f"{millis} ms"
    if millis < 60_000:
        return f"{millis / 1000:.3f}".rstrip("0").rstrip(".") + " s"
    parts: list[str] = []
    rest = millis
    smallest = max((size for size, _ in _UNITS if size <= max(precision, 1)), default=1)
    for size, name in _UNITS:
        if size < smallest and parts:
            break
        count, rest = divmod(rest, round(size * 1000))
        if count:
            parts.append(f"{count} {name}")
    return " ".join(parts[:3])


def _tick_step(seconds_per_px: float) -> float:
    wanted = seconds_per_px * 110
    return next((step for step in _STEPS if step >= wanted), _STEPS[-1])


def _lanes(run: WorkflowRun, steps: list[dict[str, Any]], firsts: Mapping[int, datetime],
           attempts: list[dict[str, Any]], graph: bool, now: datetime) -> list[Lane]:
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in attempts:
        by_step.setdefault(row["step_id"], []).append(row)
    open_end = run.finished_at or now
    lanes = []
    for step in steps:
        kind = step_kind(step["step_name"], rpc_name=step["rpc_name"],
                         child_run=step["child_run_id"],
                         data={"duration": step["duration"], "wait": step["wait"]},
                         graph=graph)
        label = step_label(step["step_name"], graph=graph)
        if kind == StepKind.COMPENSATION:
            label += " (on error)"
        lane = Lane(name=public_step_name(step["step_name"]), label=label,
                    status=step["status"], first=firsts[step["id"]])
        previous_end: datetime | None = None
        for row in by_step.get(step["id"], []):
            queued = row["scheduled_at"] or row["created_at"]
            started = row["running_at"]
            ended = row["succeeded_at"] or row["failed_at"]
            if previous_end is not None and queued > previous_end:
                lane.segments.append(Segment(previous_end, queued, "pk-tl-wait pk-tl-retry",
                                             f"retry delay before attempt {row['attempt']}",
                                             wait="retry"))
            if started is not None and started > queued:
                lane.segments.append(Segment(
                    queued, started, "pk-tl-wait pk-tl-worker",
                    f"attempt {row['attempt']} waited for a worker", wait="worker"))
            begin = started or queued
            state = row["status"] if ended is not None else "running"
            lane.segments.append(Segment(
                begin, ended or max(open_end, begin), f"pk-tl-attempt pk-tl-{state}",
                f"attempt {row['attempt']}: {state}", attempt=row["attempt"]))
            previous_end = ended
        wake = step["wake_at"]
        # A sleep: no function, a duration and a wake time (a graph run's sleep node has
        # the kind "step", its row the same shape).
        if wake is not None and step["duration"] is not None and not step["rpc_name"] \
                and kind in (StepKind.SLEEP, StepKind.STEP):
            start = wake - timedelta(seconds=float(step["duration"]))
            lane.segments.append(Segment(start, wake, "pk-tl-wait pk-tl-sleep",
                                         f"sleep until {wake.isoformat()}", wait="sleep"))
        elif kind in (StepKind.APPROVAL, StepKind.SUSPEND, StepKind.EVENT, StepKind.MESSAGE):
            end = step["updated_at"] if step["status"] != StepStatus.SUSPENDED else open_end
            wait = str(kind.value)
            lane.segments.append(Segment(step["created_at"], max(end, step["created_at"]),
                                         f"pk-tl-wait pk-tl-{wait}",
                                         f"{wait}: {lane.label} ({step['status']})", wait=wait))
        elif previous_end is not None and wake is not None and wake > previous_end and \
                step["status"] in (StepStatus.FAILED, StepStatus.SCHEDULED,
                                   StepStatus.PENDING) and not run.is_terminal:
            lane.segments.append(Segment(previous_end, wake, "pk-tl-wait pk-tl-retry",
                                         f"retrying at {wake.isoformat()}", wait="retry"))
        elif step["status"] in (StepStatus.SCHEDULED, StepStatus.PENDING) and \
                not run.is_terminal and \
                (previous_end is None or step["updated_at"] >= previous_end):
            lane.segments.append(Segment(step["updated_at"], max(now, step["updated_at"]),
                                         "pk-tl-wait pk-tl-worker", "waiting for a worker",
                                         wait="worker"))
        lanes.append(lane)
    return lanes


def _first_starts(run: WorkflowRun, steps: list[dict[str, Any]]) -> dict[int, datetime]:
    """When each step first started: its first attempt, else its sleep's start, else its
    creation (gates)."""
    firsts: dict[int, datetime] = dict(
        StepAttempt.objects.filter(step__run=run).order_by().values("step_id")
        .annotate(first=Min("created_at")).values_list("step_id", "first"))
    for step in steps:
        if step["id"] in firsts:
            continue
        if step["wake_at"] is not None and step["duration"] is not None:
            firsts[step["id"]] = step["wake_at"] - timedelta(
                seconds=float(step["duration"]))
        else:
            firsts[step["id"]] = step["created_at"]
    return firsts


def timeline_svg(run: WorkflowRun, page: str | None = None,
                 query: Mapping[str, str] | None = None) -> str:
    """The run's timeline as HTML: a note of the lanes shown, the SVG and page links.

    Three queries whatever the run's size: its steps' timing columns, each step's first
    attempt, and the attempts of the lanes shown.

    Args:
        run: The run.
        page: The lane page asked for (``?lanes=``), 1 when missing or invalid.
        query: The page's other query parameters, kept in the page links.

    Returns:
        The HTML, empty for a run without steps.
    """
    steps: list[Any] = list(WorkflowStep.objects.filter(run=run).order_by().values(
        "id", "step_name", "rpc_name", "child_run_id", "status", "wake_at", "created_at",
        "updated_at", duration=F("data__duration"), wait=F("data__wait")))
    if not steps:
        return ""
    firsts = _first_starts(run, steps)
    steps.sort(key=lambda s: (firsts[s["id"]], s["id"]))
    pages = max(1, math.ceil(len(steps) / LANES_PER_PAGE))
    number = int(page) if page and page.isascii() and page.isdigit() else 1
    number = min(max(number, 1), pages)
    shown = steps[(number - 1) * LANES_PER_PAGE: number * LANES_PER_PAGE]
    ids = [s["id"] for s in shown]
    attempts: list[Any] = list(StepAttempt.objects.filter(step_id__in=ids).order_by(
        "step_id", "attempt").values(
        "step_id", "attempt", "status", "created_at", "scheduled_at", "running_at",
        "succeeded_at", "failed_at"))
    now = timezone.now()
    graph = is_graph_run(run.workflow, run.graph_hash)
    lanes = _lanes(run, shown, firsts, attempts, graph, now)
    # The run's creation is time zero, unless a step started before it (a fake clock's
    # run: its steps carry the clock's times, its row the database's).
    zero = min(run.created_at, firsts[steps[0]["id"]])
    svg = draw(lanes, run_start=zero, now=None if run.is_terminal else now)
    first, last = (number - 1) * LANES_PER_PAGE + 1, (number - 1) * LANES_PER_PAGE + len(shown)
    note = (f"Lanes {first}-{last} of {len(steps)}, by first start" if pages > 1
            else f"{len(steps)} lane{'s' if len(steps) != 1 else ''}, by first start")
    links = []
    for label, target in (("previous", number - 1), ("next", number + 1)):
        if 1 <= target <= pages:
            params = {**(query or {}), PAGE_PARAMETER: str(target)}
            links.append(f'<a href="?{escape(urlencode(params))}" data-lanes-page="{target}">'
                         f"{label}</a>")
    return (f'<p class="pk-tl-note" data-lanes-shown="{len(shown)}" '
            f'data-lanes-total="{len(steps)}">{escape(note)} {" ".join(links)}</p>{svg}')


def draw(lanes: list[Lane], *, run_start: datetime | None = None,
         now: datetime | None = None) -> str:
    """The SVG of ``lanes``: a legend, one lane per step (``data-lane``), attempts
    (``data-attempt``) and waits (``data-wait``), the axis with ticks and breaks.

    Args:
        lanes: The lanes, in the order drawn.
        run_start: Time zero of the axis (the run's creation); the first moment if None.
        now: Drawn as a line when the run is live.

    Returns:
        The SVG element.
    """
    moments = [moment for lane in lanes for s in lane.segments for moment in (s.start, s.end)]
    moments += [lane.first for lane in lanes]
    if run_start is not None:
        moments.append(run_start)
    if now is not None:
        moments.append(now)
    axis = make_axis(moments)
    zero = run_start or axis.times[0]
    top = LEGEND_H
    height = top + LANE_H * len(lanes) + AXIS_H
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pk-timeline" width="{WIDTH}" '
             f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="Timeline of the run\'s steps">']
    parts.append(_legend())
    for index, lane in enumerate(lanes):
        y = top + index * LANE_H
        label = lane.label if len(lane.label) < 34 else lane.label[:33] + "…"
        parts.append(f'<g class="pk-tl-lane" data-lane="{escape(lane.name)}" '
                     f'data-status="{escape(lane.status)}" data-y="{y}">'
                     f'<rect class="pk-tl-band" x="0" y="{y}" width="{WIDTH}" '
                     f'height="{LANE_H}"/>'
                     f'<text x="{LABEL_W - 6}" y="{y + 14}" text-anchor="end">'
                     f"<title>{escape(lane.name)}</title>{escape(label)}</text>")
        for seg in lane.segments:
            x0, x1 = axis.x(seg.start), axis.x(seg.end)
            extra = f' data-attempt="{seg.attempt}"' if seg.attempt is not None else \
                f' data-wait="{seg.wait}"'
            inset = 0 if seg.attempt is not None else 3
            title = (f"{seg.title}, {seg.start.isoformat()} to {seg.end.isoformat()} "
                     f"({format_duration((seg.end - seg.start).total_seconds())})")
            parts.append(f'<rect class="{seg.css}"{extra} x="{x0:.1f}" '
                         f'y="{y + (LANE_H - BAR_H) / 2 + inset:.1f}" '
                         f'width="{max(x1 - x0, 2.0):.1f}" height="{BAR_H - 2 * inset}">'
                         f"<title>{escape(title)}</title></rect>")
        parts.append("</g>")
    parts.append(_axis(axis, zero, top + LANE_H * len(lanes)))
    if now is not None:
        x = axis.x(now)
        parts.append(f'<line class="pk-tl-now" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" '
                     f'y2="{top + LANE_H * len(lanes)}"><title>now</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def _legend() -> str:
    parts, x = ['<g class="pk-tl-legend">'], 4
    for state, text in _ATTEMPT_STATES:
        parts.append(f'<rect class="pk-tl-attempt pk-tl-{state}" x="{x}" y="5" width="12" '
                     f'height="10"/><text x="{x + 16}" y="14">{text}</text>')
        x += 22 + 6 * len(text)
    for wait, text in WAITS:
        parts.append(f'<rect class="pk-tl-wait pk-tl-{wait}" x="{x}" y="7" width="12" '
                     f'height="6"/><text x="{x + 16}" y="14">{text}</text>')
        x += 22 + 6 * len(text)
    parts.append("</g>")
    return "".join(parts)


def _axis(axis: Axis, zero: datetime, y: float) -> str:
    """The axis line, its ticks (elapsed time since ``zero``) and a zig-zag with the
    duration cut out at each break."""
    parts = [f'<g class="pk-tl-axis"><line x1="{LABEL_W}" x2="{LABEL_W + PLOT_W}" '
             f'y1="{y + 4}" y2="{y + 4}"/>']
    linear = [(a, b) for a, b in itertools.pairwise(axis.times)
              if (a, b) not in axis.breaks]
    seconds = sum((b - a).total_seconds() for a, b in linear)
    pixels = sum(axis.x(b) - axis.x(a) for a, b in linear)
    step = _tick_step(seconds / pixels if pixels and seconds else 0.001)
    last_x = -1e9
    labels: list[tuple[float, str, str]] = []
    for start, end in axis.breaks:
        cut = (end - start).total_seconds()
        x0, x1 = axis.x(start), axis.x(end)
        mid, points = (x0 + x1) / 2, []
        for k in range(7):
            points.append(f"{x0 + (x1 - x0) * k / 6:.1f},{y + (0 if k % 2 else 8):.1f}")
        parts.append(f'<polyline class="pk-tl-break" data-break-seconds="{cut:.3f}" '
                     f'points="{" ".join(points)}"><title>{format_duration(cut)} not drawn'
                     f"</title></polyline>")
        labels.append((mid, f"⋯ {format_duration(cut, 1 if cut > 60 else 0.001)}", "break"))
    stretch_start = axis.times[0]
    for start, end in [*axis.breaks, (axis.times[-1], axis.times[-1])]:
        # The ticks of each stretch drawn to scale, between two breaks.
        low = (stretch_start - zero).total_seconds()
        high = (start - zero).total_seconds()
        for k in range(math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9) + 1):
            if k * step < low - 1e-9:
                continue
            moment = zero + timedelta(seconds=k * step)
            labels.append((axis.x(moment), format_duration(k * step, step), "tick"))
            if len(labels) > 1000:
                break
        if end != start:  # a break: say where the axis resumes
            elapsed = (end - zero).total_seconds()
            labels.append((axis.x(end), format_duration(elapsed, step), "tick"))
        stretch_start = end
    for x, text, kind in sorted(labels):
        if kind == "tick":
            parts.append(f'<line class="pk-tl-tick" x1="{x:.1f}" x2="{x:.1f}" y1="{y + 1}" '
                         f'y2="{y + 8}"/>')
        if kind == "tick" and x - last_x < 70:
            continue
        # Break labels on a row of their own, below the ticks' (never on top of one).
        parts.append(f'<text class="pk-tl-{kind}-label" x="{x:.1f}" '
                     f'y="{y + (22 if kind == "tick" else 38)}" '
                     f'text-anchor="middle">{escape(text)}</text>')
        if kind == "tick":
            last_x = x
    parts.append("</g>")
    return "".join(parts)
