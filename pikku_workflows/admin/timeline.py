"""The run page's timeline: one bar per attempt on a shared time axis, as SVG."""

from __future__ import annotations

from datetime import datetime

from django.utils.html import escape

from ..models import StepAttempt, WorkflowRun

#: The most attempts drawn: the latest ones (a run with 20,000 attempts stays readable).
MAX_BARS = 300
ROW, LABEL_W, WIDTH = 16, 220, 900


def timeline_svg(run: WorkflowRun) -> str:
    """Bars from each attempt's creation (queued) through running to its end."""
    total = StepAttempt.objects.filter(step__run=run).count()
    rows = list(StepAttempt.objects.filter(step__run=run).order_by("-id").values_list(
        "step__step_name", "attempt", "status", "created_at", "running_at", "succeeded_at",
        "failed_at")[:MAX_BARS])[::-1]
    if not rows:
        return ""
    end_of_run = run.finished_at or run.updated_at
    start = min(r[3] for r in rows)
    end = max([end_of_run, *(r[5] or r[6] or r[4] or r[3] for r in rows)])
    span = max((end - start).total_seconds(), 0.001)
    scale = (WIDTH - LABEL_W - 10) / span

    def x(moment: datetime) -> float:
        return LABEL_W + (moment - start).total_seconds() * scale

    height = ROW * len(rows) + 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pk-timeline" width="{WIDTH}" '
             f'height="{height}" viewBox="0 0 {WIDTH} {height}">']
    for index, (name, attempt, status, created, running, succeeded, failed) in \
            enumerate(rows):
        y = index * ROW + 4
        label = f"{name} #{attempt}"
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 11}" text-anchor="end">'
                     f"{escape(label if len(label) < 34 else label[:33] + '…')}</text>")
        finished = succeeded or failed
        queued_end = running or finished or end_of_run
        parts.append(f'<rect class="queued" x="{x(created):.1f}" y="{y}" '
                     f'width="{max(x(queued_end) - x(created), 1):.1f}" height="12"/>')
        if running is not None:
            bar_end = finished or end_of_run
            state = "running" if finished is None else status
            parts.append(f'<rect class="{escape(state)}" x="{x(running):.1f}" y="{y}" '
                         f'width="{max(x(bar_end) - x(running), 2):.1f}" height="12">'
                         f"<title>{escape(label)}: {escape(status)}</title></rect>")
    seconds = span
    parts.append(f'<text x="{LABEL_W}" y="{height - 4}">0 s</text>'
                 f'<text x="{WIDTH - 10}" y="{height - 4}" text-anchor="end">'
                 f"{seconds:.3f} s</text>")
    if total > MAX_BARS:
        parts.append(f'<text x="{WIDTH / 2}" y="{height - 4}" text-anchor="middle">'
                     f"the latest {MAX_BARS} of {total} attempts</text>")
    parts.append("</svg>")
    return "".join(parts)
