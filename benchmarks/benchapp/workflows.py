"""The workflows and step functions the benchmarks run (names prefixed ``bench_``)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pikku_workflows as pw


class TransientError(Exception):
    """The planned, transient failure of a flaky benchmark step."""


def planned_failures(seed: Any, step_name: str) -> int:
    """How many times step ``step_name`` of the run with input ``seed`` fails (0, 1 or 2).

    A deterministic hash, so a checker can compute the exact number of attempts.
    """
    digest = hashlib.sha256(f"{seed}:{step_name}".encode()).digest()
    return digest[0] % 3


def _flaky(data: dict[str, Any], ctx: Any) -> dict[str, Any]:
    if ctx.attempt <= planned_failures(data["seed"], ctx.step_name):
        raise TransientError(f"planned failure {ctx.attempt} of {ctx.step_name}")
    return {"seed": data["seed"], "step": ctx.step_name, "attempt": ctx.attempt}


@pw.function
def bench_noop(data: Any) -> Any:
    """An inline no-op step."""
    return data


@pw.function(queued=True)
def bench_queued_noop(data: Any) -> Any:
    """A no-op step run on an RQ step worker."""
    return data


@pw.function(retries=2, retry_delay=0)
def bench_flaky(data: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """An inline step failing ``planned_failures`` times before it succeeds."""
    return _flaky(data, ctx)


@pw.function(queued=True, retries=2, retry_delay=0)
def bench_queued_flaky(data: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A queued step failing ``planned_failures`` times before it succeeds."""
    return _flaky(data, ctx)


@pw.workflow
def bench_steps(wf: Any, data: dict[str, Any]) -> int:
    """``data["steps"]`` sequential inline no-op steps."""
    for i in range(data["steps"]):
        wf.do(f"Step {i}", bench_noop, i)
    return data["steps"]


@pw.workflow
def bench_queued_steps(wf: Any, data: dict[str, Any]) -> int:
    """``data["steps"]`` sequential queued no-op steps."""
    for i in range(data["steps"]):
        wf.do(f"Step {i}", "bench_queued_noop", i)
    return data["steps"]


@pw.workflow
def bench_flaky_steps(wf: Any, data: dict[str, Any]) -> int:
    """``data["steps"]`` sequential flaky steps, queued if ``data["queued"]``."""
    fn = "bench_queued_flaky" if data["queued"] else "bench_flaky"
    for i in range(data["steps"]):
        wf.do(f"Step {i}", fn, {"seed": data["seed"], "i": i})
    return data["steps"]


@pw.workflow
def bench_fanout(wf: Any, data: dict[str, Any]) -> int:
    """Fan out ``data["width"]`` queued no-op steps, then join them."""
    results = wf.parallel([(f"Item {i}", "bench_queued_noop", i) for i in range(data["width"])])
    return sum(results)


@pw.workflow
def bench_sleeper(wf: Any, data: dict[str, Any]) -> int:
    """Sleep ``data["seconds"]`` durably, then take one inline step."""
    wf.sleep("Nap", data["seconds"])
    return wf.do("After", bench_noop, data["i"])


@pw.function(retries=0)
def bench_cycle_round(data: dict[str, Any], ctx: Any) -> int:
    """One round of ``bench_cycle``: goes round again until ``rounds`` rounds are done."""
    done = int(ctx.step_name.partition("#")[2] or 0) + 1  # spin, spin#1, spin#2...
    ctx.branch("again" if done < data["rounds"] else "done")
    return done


bench_cycle = pw.graph_workflow(
    "bench_cycle",
    nodes={"begin": "bench_noop", "spin": "bench_cycle_round", "leave": "bench_noop"},
    config={
        "begin": {"next": "spin"},
        "spin": {"input": {"rounds": pw.ref("trigger", "rounds")},
                 "next": {"again": "spin", "done": "leave"}},
        "leave": {"input": {"rounds": pw.ref("spin")}},
    },
    output="leave",
    description="A cycle that runs `rounds` times, then leaves by a branch.",
)


@pw.workflow
def bench_tick(wf: Any, data: Any) -> Any:
    """B13's scheduled workflow: one inline step."""
    return wf.do("Tick", bench_noop, data)


@pw.workflow
def bench_awaits_event(wf: Any, data: dict[str, Any]) -> Any:
    """B14: waits for ``bench.paid`` with its own key, then takes one inline step."""
    paid = wf.wait_for_event("Wait", "bench.paid", key=data["key"],
                             timeout=data.get("timeout"))
    return wf.do("After", bench_noop, paid)
@pw.function
def bench_short_work(data: Any) -> Any:
    """B15's step: 5 ms of work, so that keyed runs have something to serialize."""
    time.sleep(0.005)
    return data


@pw.workflow(concurrency=pw.Concurrency(max=1, key="k"))
def bench_keyed(wf: Any, data: Any) -> Any:
    """B15: one run per key ``k`` at a time; two short steps."""
    wf.do("First", bench_short_work, data)
    return wf.do("Second", bench_short_work, data)


@pw.workflow
def bench_unkeyed(wf: Any, data: Any) -> Any:
    """B15's baseline: ``bench_keyed`` without its concurrency limit."""
    wf.do("First", bench_short_work, data)
    return wf.do("Second", bench_short_work, data)
# B16: the cost a named step limit adds to a step (benchmarks/settings.py's LIMITS).
@pw.function(limits=["bench_api"])
def bench_limited_noop(data: Any) -> Any:
    """An inline no-op step holding a concurrency limit."""
    return data


@pw.function(limits=["bench_rate"])
def bench_rated_noop(data: Any) -> Any:
    """An inline no-op step holding a rate limit."""
    return data


@pw.workflow
def bench_limited_steps(wf: Any, data: dict[str, Any]) -> int:
    """``data["steps"]`` sequential inline no-op steps of function ``data["fn"]``."""
    for i in range(data["steps"]):
        wf.do(f"Step {i}", data["fn"], i)
    return data["steps"]
