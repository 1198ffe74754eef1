"""The run page's timeline, read from its SVG geometry: one lane per step with all its
attempts, waits in their own style, long waits cut out with a break, lanes by first
start and paged (never dropped silently), constant queries."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.admin.timeline import (
    BREAK_W,
    LABEL_W,
    LANES_PER_PAGE,
    PLOT_W,
    Lane,
    Segment,
    draw,
    format_duration,
    make_axis,
    timeline_svg,
)
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.testing import fake_clock

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"


def parse(html: str) -> ET.Element:
    return ET.fromstring(html[html.index("<svg"):])


def lanes(svg: ET.Element) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if "data-lane" in g.attrib]


def rects(lane: ET.Element, attribute: str) -> list[ET.Element]:
    return [r for r in lane.iter(f"{SVG}rect") if attribute in r.attrib]


def span(rect: ET.Element) -> tuple[float, float]:
    x = float(rect.attrib["x"])
    return x, x + float(rect.attrib["width"])


def test_a_step_retried_200_times_is_one_lane_with_200_attempts():
    run = pw.start_workflow("retrying", {"fail_times": 199, "retries": 199}, inline=True)
    assert run.status == "completed"
    svg = parse(timeline_svg(run))
    (lane,) = lanes(svg)
    assert lane.attrib["data-lane"] == "Flaky"
    marks = rects(lane, "data-attempt")
    assert sorted(int(r.attrib["data-attempt"]) for r in marks) == list(range(1, 201))
    classes = [r.attrib["class"] for r in sorted(marks, key=lambda r: int(
        r.attrib["data-attempt"]))]
    assert all("pk-tl-failed" in c for c in classes[:-1]) and "pk-tl-succeeded" in classes[-1]


def test_a_week_long_sleep_is_cut_out_with_a_break():
    with fake_clock(timezone.now() - timedelta(days=8)):
        run = pw.start_workflow("sleeps_a_week", {}, inline=True)
    assert run.status == "completed"
    svg = parse(timeline_svg(run))
    breaks = [p for p in svg.iter(f"{SVG}polyline") if "data-break-seconds" in p.attrib]
    assert len(breaks) == 1
    assert float(breaks[0].attrib["data-break-seconds"]) > 6.9 * 86400
    by_name = {g.attrib["data-lane"]: g for g in lanes(svg)}
    assert list(by_name) == ["Before", "A week", "After"]  # by first start
    (sleep,) = rects(by_name["A week"], "data-wait")
    assert sleep.attrib["data-wait"] == "sleep"
    # The week takes the break's width (and the few pixels either side), not the plot.
    x0, x1 = span(sleep)
    assert x1 - x0 <= BREAK_W + 12
    labels = [t.text for t in svg.iter(f"{SVG}text")
              if t.attrib.get("class") == "pk-tl-break-label"]
    assert labels == ["⋯ 7 d"]


def test_long_waits_do_not_squash_the_work_around_them():
    start = timezone.now()

    def at(seconds):
        return start + timedelta(seconds=seconds)

    work = [Lane("A", "A", "succeeded", at(0), [Segment(at(0), at(2), "pk-tl-attempt",
                                                        "a", attempt=1)]),
            Lane("Nap", "Nap", "succeeded", at(2), [Segment(at(2), at(2 + 3 * 86400),
                                                            "pk-tl-wait", "n", wait="sleep")]),
            Lane("B", "B", "succeeded", at(2 + 3 * 86400),
                 [Segment(at(2 + 3 * 86400), at(3 + 3 * 86400), "pk-tl-attempt", "b",
                          attempt=1)])]
    svg = parse(draw(work, run_start=start))
    by_name = {g.attrib["data-lane"]: g for g in lanes(svg)}
    a = span(rects(by_name["A"], "data-attempt")[0])
    b = span(rects(by_name["B"], "data-attempt")[0])
    # Three seconds of work share the plot but the break: 2 s and 1 s, in proportion.
    assert a[1] - a[0] == pytest.approx((PLOT_W - BREAK_W) * 2 / 3, abs=1)
    assert b[1] - b[0] == pytest.approx((PLOT_W - BREAK_W) / 3, abs=1)
    assert a[0] == pytest.approx(LABEL_W)
    assert b[0] - a[1] == pytest.approx(BREAK_W, abs=0.5)


def test_the_axis_cuts_only_what_dwarfs_the_rest():
    start = timezone.now()
    backoff = [start + timedelta(seconds=s) for s in (0, 1, 3, 7, 15, 31, 63)]
    assert make_axis(backoff).breaks == []  # doubling delays stay to scale
    assert make_axis([start, start + timedelta(seconds=0.5)]).breaks == []
    axis = make_axis([start, start + timedelta(seconds=1), start + timedelta(hours=1)])
    assert axis.breaks == [(start + timedelta(seconds=1), start + timedelta(hours=1))]


def test_ticks_are_labelled_in_sensible_units():
    assert format_duration(0) == "0"
    assert format_duration(0.25) == "250 ms"
    assert format_duration(1.5) == "1.5 s"
    assert format_duration(90, 1) == "1 min 30 s"
    assert format_duration(3 * 86400 + 1.5, 60) == "3 d"
    assert format_duration(3 * 86400 + 10.5, 5) == "3 d 10 s"
    run = pw.start_workflow("retrying", {"fail_times": 1}, inline=True)
    svg = parse(timeline_svg(run))
    ticks = [t.text for t in svg.iter(f"{SVG}text")
             if t.attrib.get("class") == "pk-tl-tick-label"]
    assert ticks and ticks[0] == "0"
    assert all(re.fullmatch(r"0|\d+ ms|[\d.]+ s|(\d+ (d|h|min|s|ms) ?)+", t) for t in ticks)


def make_run(steps: int, attempts_each: int = 1) -> WorkflowRun:
    """A run whose steps' ids run opposite to their start times, with queued attempts
    (a wait for a worker) and a retry delay between attempts."""
    run = WorkflowRun.objects.create(workflow="synthetic", status="completed")
    start = timezone.now() - timedelta(hours=1)
    for index in range(steps):
        step = WorkflowStep.objects.create(run=run, step_name=f"step {index}", rpc_name="f",
                                           status="succeeded", attempt_count=attempts_each)
        first = start + timedelta(seconds=10 * (steps - index))
        StepAttempt.objects.bulk_create([StepAttempt(
            step=step, attempt=n + 1, status="succeeded" if n == attempts_each - 1 else "failed",
            created_at=first + timedelta(seconds=3 * n), scheduled_at=first + timedelta(
                seconds=3 * n), running_at=first + timedelta(seconds=3 * n + 1),
            **{"succeeded_at" if n == attempts_each - 1 else "failed_at":
               first + timedelta(seconds=3 * n + 2)}) for n in range(attempts_each)])
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=start + timedelta(hours=1))
    run.refresh_from_db()
    return run


def test_lanes_are_ordered_by_first_start_with_their_waits():
    run = make_run(3, attempts_each=2)
    svg = parse(timeline_svg(run))
    shown = lanes(svg)
    assert [g.attrib["data-lane"] for g in shown] == ["step 2", "step 1", "step 0"]
    ys = [float(g.attrib["data-y"]) for g in shown]
    assert ys == sorted(ys)
    waits = [r.attrib["data-wait"] for r in rects(shown[0], "data-wait")]
    assert waits == ["worker", "retry", "worker"]
    # Each wait sits between the attempts it separates.
    first, second = sorted(rects(shown[0], "data-attempt"), key=lambda r: r.attrib["x"])
    retry = next(r for r in rects(shown[0], "data-wait") if r.attrib["data-wait"] == "retry")
    assert span(first)[1] == pytest.approx(span(retry)[0], abs=0.2)
    assert span(retry)[1] <= span(second)[0] + 0.2


def test_an_approval_wait_is_drawn_until_now():
    run = pw.start_workflow("needs_approval", {}, inline=True)
    assert run.status == "suspended"
    svg = parse(timeline_svg(run))
    by_name = {g.attrib["data-lane"]: g for g in lanes(svg)}
    (gate,) = rects(by_name["approval:Manager sign-off"], "data-wait")
    assert gate.attrib["data-wait"] == "approval"
    assert any(line.attrib.get("class") == "pk-tl-now" for line in svg.iter(f"{SVG}line"))


def test_many_lanes_are_paged_and_say_so(admin_client):
    run = make_run(LANES_PER_PAGE + 30)
    html = timeline_svg(run)
    assert f"Lanes 1-{LANES_PER_PAGE} of {LANES_PER_PAGE + 30}, by first start" in html
    first_page = [g.attrib["data-lane"] for g in lanes(parse(html))]
    assert len(first_page) == LANES_PER_PAGE
    assert first_page[0] == f"step {LANES_PER_PAGE + 29}"  # the first started, never dropped
    second = timeline_svg(run, "2", {"steps": "2"})
    assert f"Lanes {LANES_PER_PAGE + 1}-{LANES_PER_PAGE + 30}" in second
    assert 'href="?steps=2&amp;lanes=1"' in second
    rest = [g.attrib["data-lane"] for g in lanes(parse(second))]
    assert len(rest) == 30 and not set(rest) & set(first_page)
    assert rest[-1] == "step 0"
    page = admin_client.get(reverse("admin:pikku_workflows_workflowrun_change",
                                    args=[run.pk]) + "?lanes=2").content.decode()
    assert f"Lanes {LANES_PER_PAGE + 1}-{LANES_PER_PAGE + 30}" in page


def test_the_timeline_costs_the_same_queries_for_3_and_300_steps():
    def count(run):
        with CaptureQueriesContext(connection) as captured:
            timeline_svg(run)
        return len(captured)

    assert count(make_run(3, 2)) == count(make_run(300, 3))


def test_live_waits_run_until_now_or_the_retry_time():
    """A step waiting to retry (its wake time ahead), a queued step no worker has picked
    up yet: each a wait of its kind, up to the retry time and up to now."""
    now = timezone.now()
    run = WorkflowRun.objects.create(workflow="synthetic", status="running")
    retrying = WorkflowStep.objects.create(run=run, step_name="Charge", rpc_name="f",
                                           status="failed", attempt_count=1,
                                           wake_at=now + timedelta(seconds=30))
    StepAttempt.objects.create(step=retrying, attempt=1, status="failed",
                               created_at=now - timedelta(seconds=5),
                               running_at=now - timedelta(seconds=5),
                               failed_at=now - timedelta(seconds=4))
    queued = WorkflowStep.objects.create(run=run, step_name="Ship", rpc_name="f",
                                         status="scheduled")
    WorkflowStep.objects.filter(pk=queued.pk).update(updated_at=now - timedelta(seconds=3))
    svg = parse(timeline_svg(run))
    by_name = {g.attrib["data-lane"]: g for g in lanes(svg)}
    (retry,) = rects(by_name["Charge"], "data-wait")
    assert retry.attrib["data-wait"] == "retry"
    (attempt,) = rects(by_name["Charge"], "data-attempt")
    assert span(retry)[0] == pytest.approx(span(attempt)[1], abs=0.2)
    (worker,) = rects(by_name["Ship"], "data-wait")
    assert worker.attrib["data-wait"] == "worker"
    now_x = float(next(line for line in svg.iter(f"{SVG}line")
                       if line.attrib.get("class") == "pk-tl-now").attrib["x1"])
    assert span(worker)[1] == pytest.approx(now_x, abs=2)
    assert span(retry)[1] > now_x  # the retry is due after now
