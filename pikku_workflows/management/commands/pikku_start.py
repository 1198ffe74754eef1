"""``manage.py pikku_start NAME [JSON] [--wait] [--start-at WHEN | --delay D]``: start a
workflow run from the shell (or schedule it: ``--start-at``/``--delay`` leave it
``scheduled`` until then; the time keeper starts it).

With ``--wait`` the command follows the run to its end with a one-line progress bar
(plain text redrawn in place; shown only on a terminal) naming the step under way,
prints the output when the run completes, and exits non-zero otherwise: 1 failed,
2 cancelled, 3 suspended, 4 ``--timeout`` passed.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, Q

from ...engine.clock import Clock, clock, install_clock
from ...engine.summary import public_error
from ...exceptions import WorkflowError
from ...models import WorkflowRun, WorkflowStep
from ...operations import start_workflow, started_from
from ...registry import registry
from ...signals import run_started, step_failed, step_retried, step_succeeded
from ...status import RunStatus, StepStatus
from ...step_keys import step_label
from ..run_filters import parse_moment

EXIT_CODES: dict[str, int] = {RunStatus.FAILED: 1, RunStatus.CANCELLED: 2, RunStatus.SUSPENDED: 3}
TIMED_OUT = 4
POLL = 0.2


#: Erase the terminal's line and return to its first column (no carriage return, so that
#: captured output keeps its lines).
ERASE_LINE = "\x1b[2K\x1b[G"
BAR_WIDTH = 20


class Bar:
    """A progress line on the command's stdout, redrawn in place on a terminal and erased
    at the end: the workflow, a bar, completed/planned steps, the time elapsed and the
    step under way. Not a terminal (a pipe, a log): nothing, only the final lines."""

    def __init__(self, stdout: Any, workflow: str, total: int | None) -> None:
        # The raw stream: Django's OutputWrapper would end each redraw with a newline.
        self.stream = getattr(stdout, "_out", stdout)
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.workflow = workflow
        self.total = total
        self.started = time.monotonic()
        self.drawn = False

    def show(self, done: int, step: str) -> None:
        """Redraw the line.

        Args:
            done: Steps completed so far.
            step: What the run is doing now (a step's label, its attempt).
        """
        if not self.enabled:
            return
        if self.total is not None:
            done = min(done, self.total)
            filled = BAR_WIDTH * done // self.total if self.total else BAR_WIDTH
            count = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{self.total}"
        else:
            count = f"{done} step{'s' if done != 1 else ''}"
        elapsed = int(time.monotonic() - self.started)
        line = (f"{self.workflow} {count} {elapsed // 3600}:{elapsed // 60 % 60:02d}:"
                f"{elapsed % 60:02d} {step}").rstrip()
        # One line shorter than the terminal: a wrapped line could not be redrawn in place.
        width = shutil.get_terminal_size().columns - 1
        self.stream.write(ERASE_LINE + line[:max(width, 20)])
        self.stream.flush()
        self.drawn = True

    def __enter__(self) -> Bar:
        self.show(0, "")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.drawn:
            self.stream.write(ERASE_LINE)
            self.stream.flush()


def _total(planned: Any) -> int | None:
    """The number of steps the run will take, when the analysis knows it."""
    if isinstance(planned, list) and planned:
        return len(planned)
    return None


def _describe(step: str, attempt: int | None) -> str:
    """A step as the bar names it: its label (a gate by its reason), and its attempt."""
    label = step_label(step)
    return label if not attempt or attempt < 2 else f"{label} (attempt {attempt})"


def _progress(run_id: uuid.UUID) -> tuple[int, str]:
    """Succeeded steps of a run, and what it is doing now (read from its rows)."""
    steps = WorkflowStep.objects.filter(run_id=run_id)
    done = steps.aggregate(n=Count("pk", filter=Q(status=StepStatus.SUCCEEDED)))["n"]
    current = steps.exclude(status=StepStatus.SUCCEEDED).order_by(
        "-updated_at", "-pk").values_list("step_name", "attempt_count").first()
    return done, _describe(*current) if current else ""


class _NamingWaits(Clock):
    """The clock in force, naming the step under way on the bar before each wait.

    An inline run waits (a sleep, a retry delay) inside ``start_workflow``, where no
    signal tells which step it waits for; its rows, committed before the wait, do.
    """

    def __init__(self, inner: Clock, before_wait: Callable[[], None]) -> None:
        self.inner = inner
        self.before_wait = before_wait

    def now(self) -> datetime:
        return self.inner.now()

    def sleep(self, seconds: float) -> None:
        self.before_wait()
        self.inner.sleep(seconds)

    def sleep_until(self, moment: datetime) -> None:
        self.before_wait()
        self.inner.sleep_until(moment)

    def after(self, seconds: float) -> datetime:
        return self.inner.after(seconds)


class Command(BaseCommand):
    help = "Start a run of a registered workflow and print its id (and result with --wait)."

    #: ``start_workflow``'s ``start_at`` and ``delay``, from the options.
    when: dict[str, Any]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the registered workflow name")
        parser.add_argument("input", nargs="?", default="null", help="the run input, as JSON")
        parser.add_argument("--wait", action="store_true",
                            help="follow the run to its end with a progress bar; print its "
                                 "output, or exit 1 failed, 2 cancelled, 3 suspended")
        parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                            help="with --wait: give up (exit 4) after this many seconds")
        parser.add_argument("--inline", action="store_true",
                            help="run in this process, whatever the EXECUTOR setting")
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--start-at", metavar="WHEN",
                          help="start then (ISO date and time; without an offset, in "
                               "TIME_ZONE): the run is scheduled until then")
        when.add_argument("--delay", metavar="DURATION",
                          help="start after this long (seconds, or e.g. 10min)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            data = json.loads(options["input"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"the input is not valid JSON: {exc}") from None
        self.when = {
            "start_at": parse_moment(options["start_at"], "--start-at")
            if options["start_at"] else None,
            "delay": options["delay"]}
        if not options["wait"]:
            run = self._start(options["name"], data, options["inline"])
            if run.status == RunStatus.SCHEDULED and run.start_at is not None:
                self.stderr.write(f"scheduled to start at {run.start_at.isoformat()}")
            self.stdout.write(str(run.pk))
            return
        try:
            definition = registry.workflow(options["name"])
        except WorkflowError as exc:
            raise CommandError(str(exc)) from None
        started = time.monotonic()
        with Bar(self.stdout, options["name"],
                 _total(definition.analysis.planned_steps)) as bar:
            # An inline run runs inside start_workflow: its step signals move the bar.
            with self._follow_signals(bar):
                run = self._start(options["name"], data, options["inline"])
            self._wait(run, bar, options["timeout"], started)
        self._report(WorkflowRun.objects.get(pk=run.pk), time.monotonic() - started)

    def _start(self, name: str, data: Any, inline: bool) -> WorkflowRun:
        try:
            with started_from({"type": "cli"}):
                return start_workflow(name, data, inline=inline or None, **self.when)
        except WorkflowError as exc:
            raise CommandError(str(exc)) from None

    @contextmanager
    def _follow_signals(self, bar: Bar) -> Any:
        first: list[Any] = []
        done: set[str] = set()

        def started(run: Any, **kwargs: Any) -> None:
            if not first:
                first.append(run)

        def step_event(signal: Any, run: Any, step: str, attempt: int, **kwargs: Any) -> None:
            if first and run != first[0]:
                return  # a child run's step
            if signal is step_succeeded:
                done.add(step)
                bar.show(len(done), step_label(step))
            elif signal is step_retried:
                bar.show(len(done), _describe(step, attempt + 1))
            else:
                bar.show(len(done), f"{step_label(step)} failed")

        def before_wait() -> None:
            if first:
                current = _progress(first[0])[1]
                if current:
                    bar.show(len(done), current)

        receivers = [(run_started, started)] + [
            (signal, step_event) for signal in (step_succeeded, step_retried, step_failed)]
        for signal, receiver in receivers:
            signal.connect(receiver, weak=False, dispatch_uid=f"pikku_start-{id(self)}")
        previous = install_clock(_NamingWaits(clock(), before_wait))
        try:
            yield
        finally:
            install_clock(previous)
            for signal, _ in receivers:
                signal.disconnect(dispatch_uid=f"pikku_start-{id(self)}")

    def _wait(self, run: WorkflowRun, bar: Bar, timeout: float | None, started: float) -> None:
        """Poll a run that runs elsewhere (workers) until it settles."""
        while True:
            status = WorkflowRun.objects.filter(pk=run.pk).values_list(
                "status", flat=True).first()
            if status not in (RunStatus.RUNNING, RunStatus.SCHEDULED):
                return
            bar.show(*_progress(run.pk))
            if timeout is not None and time.monotonic() - started > timeout:
                raise CommandError(f"run {run.pk} is still running after {timeout:g}s",
                                   returncode=TIMED_OUT)
            time.sleep(POLL)

    def _report(self, run: WorkflowRun, seconds: float) -> None:
        done, _ = _progress(run.pk)
        self.stdout.write(f"run {run.pk} of {run.workflow} {run.status} in {seconds:.1f}s "
                          f"({done} step{'s' if done != 1 else ''} succeeded)")
        if run.status == RunStatus.COMPLETED:
            self.stdout.write(json.dumps(run.output, indent=2))
            return
        error = public_error(run.error) or {}
        detail = str(error.get("message") or run.status)
        if error.get("code"):
            detail += f" [{error['code']}]"
        if error.get("step"):
            self.stdout.write(f"step: {error['step']}")
        self.stdout.write(f"error: {detail}")
        raise CommandError(f"run {run.pk} {run.status}: {detail}",
                           returncode=EXIT_CODES.get(run.status, 1))
