"""The chaos scenario: start ``fault_order`` runs, SIGKILL random workers, check the ledger.

Shared by the CI test (200 runs, 2 workers) and ``make soak`` (10,000 runs, 4 workers).
"""

from __future__ import annotations

import math
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count

import pikku_workflows as pw
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.attempts import attempt_order_problems

from .models import FaultLedger
from .workflows import LEDGER_STEPS, expected_output


@dataclass
class ChaosReport:
    """What a chaos run measured: throughput, each kill's recovery time, run latency."""

    runs: int
    workers: int
    seconds: float = 0.0
    kills: list[float] = field(default_factory=list)
    lost_attempts: int = 0
    latencies: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    def percentile(self, values: list[float], share: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]

    def summary(self) -> dict[str, Any]:
        return {
            "runs": self.runs, "workers": self.workers, "seconds": round(self.seconds, 1),
            "runs_per_second": round(self.runs_per_second, 1), "kills": len(self.kills),
            "recovery_seconds_max": round(max(self.kills, default=0.0), 2),
            "recovery_seconds_p50": round(self.percentile(self.kills, 0.5), 2)
            if self.kills else 0.0,
            "lost_attempts": self.lost_attempts,
            "run_latency_p50": round(self.percentile(self.latencies, 0.5), 2),
            "run_latency_p99": round(self.percentile(self.latencies, 0.99), 2),
        }


def start_orders(count: int, first: int = 0) -> dict[Any, tuple[str, int]]:
    """Start ``count`` ``fault_order`` runs on the queues (keys numbered from ``first``);
    their ids, keys and amounts."""
    started = {}
    for i in range(first, first + count):
        key, amount = f"order-{i}", i % 97 + 1
        run = pw.start_workflow("fault_order", {"key": key, "amount": amount}, inline=False)
        started[run.pk] = (key, amount)
    return started


def unfinished(run_ids: list[Any]) -> int:
    return WorkflowRun.objects.filter(pk__in=run_ids).exclude(
        status__in=RunStatus.terminal()).count()


def _running_attempts() -> set[tuple[int, int]]:
    """The (step, attempt) pairs running now."""
    return set(WorkflowStep.objects.filter(status=StepStatus.RUNNING, child_run__isnull=True)
               .values_list("pk", "attempt_count"))


def _settled(attempts: set[tuple[int, int]]) -> bool:
    """Whether each of these attempts has ended (succeeded, failed, or given up as lost)."""
    still = WorkflowStep.objects.filter(
        pk__in=[pk for pk, _ in attempts], status=StepStatus.RUNNING
    ).values_list("pk", "attempt_count")
    return not attempts & set(still)


def run_chaos(pool: Any, *, runs: int, workers: int, kill_every: float, kill_for: float,
              settle_timeout: float, in_flight: int | None = None, seed: int = 7
              ) -> ChaosReport:
    """Run ``runs`` runs on ``workers`` workers; SIGKILL one every ``kill_every`` s.

    At most ``in_flight`` runs are unfinished at a time (default: all started at once): a
    new one starts as one ends, so run latency and recovery times measure the engine,
    not a queue of runs that have not started. A killed worker is replaced at once.
    Killing stops after ``kill_for`` seconds or when every run ended; then one
    ``pikku_recover`` runs and the runs get ``settle_timeout`` seconds to end. A kill's
    recovery time is how long until every step that was running when it struck has
    ended its attempt (the killed worker's wait for the recovery sweep to see their
    lease lapse).
    """
    rng = random.Random(seed)
    report = ChaosReport(runs=runs, workers=workers)
    window = min(runs, in_flight or runs)
    pool.start(workers)
    began = time.monotonic()
    started = start_orders(window)
    open_ids = set(started)  # the runs not seen finished yet (at most ``window``)
    watching: list[tuple[float, set[tuple[int, int]]]] = []
    next_kill = time.monotonic() + kill_every
    while time.monotonic() - began < kill_for:
        open_ids = set(WorkflowRun.objects.filter(pk__in=open_ids).exclude(
            status__in=RunStatus.terminal()).values_list("pk", flat=True))
        if len(started) < runs and len(open_ids) < window:
            more = start_orders(min(window - len(open_ids), runs - len(started)),
                                first=len(started))
            started.update(more)
            open_ids.update(more)
        elif not open_ids:
            break
        now = time.monotonic()
        if now >= next_kill:
            victims = [p for p in pool.procs if p.poll() is None]
            watching.append((now, _running_attempts()))
            pool.kill(rng.choice(victims), signal.SIGKILL)
            pool.start(1)
            next_kill = time.monotonic() + kill_every
        watching = _resolve(watching, report)
        time.sleep(0.1)
    run_ids = list(started)
    pool.run("pikku_recover")
    deadline = time.monotonic() + settle_timeout
    while unfinished(run_ids) or watching:
        watching = _resolve(watching, report)
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    report.seconds = time.monotonic() - began
    report.lost_attempts = StepAttempt.objects.filter(
        step__run__in=run_ids, error__type="WorkerLost").count()
    report.latencies = [
        (run.finished_at - run.created_at).total_seconds()
        for run in WorkflowRun.objects.filter(pk__in=run_ids, finished_at__isnull=False)]
    report.problems = check_orders(started)
    return report


def _resolve(watching: list[tuple[float, set[tuple[int, int]]]], report: ChaosReport
             ) -> list[tuple[float, set[tuple[int, int]]]]:
    left = []
    for struck, steps in watching:
        if _settled(steps):
            report.kills.append(time.monotonic() - struck)
        else:
            left.append((struck, steps))
    return left


def check_orders(started: dict[Any, tuple[str, int]]) -> list[str]:
    """Every run completed with its output; every atomic step left exactly one ledger row;
    every attempt's timestamps are in order."""
    problems = attempt_order_problems(started)
    runs = {run.pk: run for run in WorkflowRun.objects.filter(pk__in=list(started))}
    for run_id, (key, amount) in started.items():
        run = runs[run_id]
        if run.status != RunStatus.COMPLETED:
            problems.append(f"run {key} is {run.status}: {run.error}")
        elif run.output != expected_output(key, amount):
            problems.append(f"run {key} output {run.output}")
    rows = FaultLedger.objects.filter(run_key__in=[key for key, _ in started.values()])
    per_step = rows.values("run_key", "step").annotate(n=Count("id"))
    doubled = [f"{r['run_key']}/{r['step']} x{r['n']}" for r in per_step if r["n"] != 1]
    problems += [f"ledger rows doubled: {', '.join(doubled[:10])}"] if doubled else []
    expected = len(started) * len(LEDGER_STEPS)
    if rows.count() != expected:
        problems.append(f"{rows.count()} ledger rows, expected {expected}")
    return problems


def describe_unfinished(run_ids: list[Any], limit: int = 5) -> str:
    """The first unfinished runs with their steps: what a failed wait shows."""
    lines = []
    runs = WorkflowRun.objects.filter(pk__in=run_ids).exclude(status__in=RunStatus.terminal())
    for run in runs[:limit]:
        lines.append(f"run {run.pk} {run.workflow} {run.status} lease={run.lease_expires_at}")
        for step in WorkflowStep.objects.filter(run=run).order_by("pk"):
            lines.append(f"  {step.step_name} {step.status} attempts={step.attempt_count} "
                         f"wake={step.wake_at} lease={step.lease_expires_at} "
                         f"child={step.child_run_id}")
    return "\n".join(lines)
