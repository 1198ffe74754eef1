"""The dashboard's drawings, server-rendered SVG: runs per bucket, and small duration bars."""

from __future__ import annotations

from django.utils.html import escape

from .dashboard_data import Bucket, Durations, TimeWindow

#: The chart's plot area and margins, in SVG units (pixels at 100 %).
PLOT_W = 720
PLOT_H = 160
LEFT = 44
TOP = 12
BOTTOM = 34
#: The series of the runs chart: attribute name, label, colour (the console's pills').
SERIES = (("created", "created", "#3b82c4"), ("completed", "completed", "#2e9d50"),
          ("failed", "failed", "#d23b3b"))
#: Every how many buckets the time axis has a label.
LABEL_EVERY = {"minute": 5, "hour": 2}
#: The small bars of a durations table.
BAR_W = 160
BAR_H = 8


def bucket_label(bucket: Bucket) -> str:
    """A bucket's label on the time axis: its start, wall clock in the user's zone."""
    return f"{bucket.start:%H:%M}"


def runs_chart(win: TimeWindow) -> str:
    """The runs created, completed and failed per bucket, side by side in each bucket.

    A bar's height is its count over the largest count of the chart, times the plot's
    height (``data-count`` holds the count); the top of the value axis is that largest
    count. An empty window draws the axes and says so.

    Args:
        win: The window, its buckets counted (``dashboard_data.count_runs``).

    Returns:
        The SVG text.
    """
    buckets = win.buckets
    top = max((getattr(b, name) for b in buckets for name, _, _ in SERIES), default=0)
    width, height = LEFT + PLOT_W + 8, TOP + PLOT_H + BOTTOM
    slot = PLOT_W / len(buckets)
    bar = slot * 0.8 / len(SERIES)
    base = TOP + PLOT_H
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pk-chart" role="img" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'data-top="{top}">',
             f"<title>Runs created, completed and failed: {escape(win.span.label)}</title>",
             f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{LEFT + PLOT_W}" y2="{base}" '
             'stroke="#888"/>',
             f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" '
             'stroke="#888"/>',
             f'<text class="value-label" data-value="0" x="{LEFT - 4}" y="{base}" '
             'text-anchor="end" font-size="10">0</text>']
    if top:
        parts.append(f'<text class="value-label" data-value="{top}" x="{LEFT - 4}" '
                     f'y="{TOP + 8}" text-anchor="end" font-size="10">{top}</text>'
                     f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{LEFT + PLOT_W}" '
                     f'y2="{TOP}" stroke="#ddd"/>')
    else:
        parts.append(f'<text class="empty" x="{LEFT + PLOT_W / 2:.1f}" y="{TOP + PLOT_H / 2}" '
                     'text-anchor="middle" font-size="12" fill="#888">No run created or '
                     'finished in this window.</text>')
    every = LABEL_EVERY.get(win.span.unit, 1)
    for index, bucket in enumerate(buckets):
        x0 = LEFT + index * slot + slot * 0.1
        stamp = bucket.start.isoformat()
        for offset, (name, label, colour) in enumerate(SERIES):
            count = getattr(bucket, name)
            if not count:
                continue
            h = count / top * PLOT_H
            parts.append(
                f'<rect class="bar {name}" data-series="{name}" data-bucket="{stamp}" '
                f'data-count="{count}" x="{x0 + offset * bar:.2f}" y="{base - h:.2f}" '
                f'width="{bar:.2f}" height="{h:.2f}" fill="{colour}">'
                f"<title>{escape(bucket_label(bucket))}: {count} {label}</title></rect>")
        if index % every == 0:
            parts.append(f'<text class="time-label" data-bucket="{stamp}" '
                         f'x="{LEFT + index * slot + slot / 2:.2f}" y="{base + 14}" '
                         f'text-anchor="middle" font-size="10">'
                         f"{escape(bucket_label(bucket))}</text>")
    for offset, (name, label, colour) in enumerate(SERIES):
        x = LEFT + offset * 90
        parts.append(f'<g class="legend" data-series="{name}"><rect x="{x}" '
                     f'y="{base + 22}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{base + 31}" font-size="11">{label}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def duration_text(seconds: float | None) -> str:
    """A duration as the tables say it: ``850 ms``, ``12.4 s``, ``3 min 5 s``, ``2 h 1 min``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {round(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def duration_bars(row: Durations, scale: float) -> str:
    """p50 and p95 of a row as two small bars, their lengths proportional to the values
    (``scale``: the table's largest p95, drawn ``BAR_W`` long)."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pk-bars" width="{BAR_W}" '
             f'height="{BAR_H * 2 + 2}" viewBox="0 0 {BAR_W} {BAR_H * 2 + 2}" '
             f'data-p50="{row.p50}" data-p95="{row.p95}">']
    for index, (name, value, colour) in enumerate((("p50", row.p50, "#3b82c4"),
                                                   ("p95", row.p95, "#c98a12"))):
        w = (value or 0) / scale * BAR_W if scale else 0.0
        parts.append(f'<rect class="{name}" x="0" y="{index * (BAR_H + 2)}" '
                     f'width="{w:.2f}" height="{BAR_H}" fill="{colour}">'
                     f"<title>{name} {duration_text(value)}</title></rect>")
    parts.append("</svg>")
    return "".join(parts)


def with_bars(rows: list[Durations]) -> list[dict[str, object]]:
    """The rows of a durations table, each with its text and its bars on one scale."""
    scale = max((r.p95 or 0 for r in rows), default=0.0)
    return [{"row": r, "p50": duration_text(r.p50), "p95": duration_text(r.p95),
             "bars": duration_bars(r, scale)} for r in rows]
