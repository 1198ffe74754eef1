"""Every benchmark (B1-B7) at a tiny size: its correctness checks, never its speed."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from benchmarks import (
    b01_inline,
    b02_flaky,
    b03_queued,
    b04_fanout,
    b05_long_runs,
    b06_sleepers,
    b07_soak,
    b08_api_scale,
    b09_console_scale,
    b10_graph_cycles,
)
from benchmarks.harness import WorkerPool, check_runs, flush_redis, workers
from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
from pikku_workflows.registry import registry
from tests.services import unavailable

RQ_SETTINGS = {"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0}


@pytest.fixture(autouse=True)
def bench_workflows() -> Iterator[None]:
    """The benchmark app's workflows, registered for this test only."""
    with registry.isolated():
        module = importlib.import_module("benchmarks.benchapp.workflows")
        importlib.reload(module)  # registers into the isolated registry
        yield


@pytest.fixture
def rq_ready(transactional_db: Any) -> Iterator[None]:
    """PostgreSQL, a flushed Redis and the RQ executor; missing services skip (fail in CI)."""
    import redis

    if connection.vendor != "postgresql":
        unavailable("the worker benchmarks need PostgreSQL")
    with override_settings(PIKKU_WORKFLOWS=RQ_SETTINGS):
        try:
            flush_redis()
        except redis.RedisError as exc:
            unavailable(f"Redis is not reachable: {exc}")
        yield
        flush_redis()


# --- inline: any database ------------------------------------------------------------------


@pytest.mark.django_db
def test_b01_inline_runs_complete_with_every_step_once() -> None:
    result = b01_inline.run_ours(runs=2, steps=5, warmup=1, floor_commits=5)
    assert result["problems"] == []
    assert result["steps"] == 10
    assert result["floor_ms"] > 0
    assert result["statements"] > 0 and result["round_trips"] >= result["statements"]


@pytest.mark.django_db
def test_b02_inline_flaky_steps_take_exactly_the_planned_attempts() -> None:
    result = b02_flaky.run_inline(runs=3, steps=6)
    assert result["problems"] == []
    assert result["steps"] == 18
    assert result["attempts"] > result["steps"]  # some steps failed before succeeding


@pytest.mark.django_db
def test_the_checker_notices_a_lost_attempt_and_an_unplanned_one() -> None:
    import pikku_workflows as pw

    run = pw.start_workflow("bench_flaky_steps", {"seed": "x", "steps": 4, "queued": False},
                            inline=True)
    assert check_runs([run.pk], 4, b02_flaky.planned_attempts) == []
    assert check_runs([run.pk], 5) != []  # wrong step count
    StepAttempt.objects.filter(step__run=run).order_by("pk")[0].delete()
    assert check_runs([run.pk], 4, b02_flaky.planned_attempts) != []


@pytest.mark.django_db
def test_b05_long_runs_count_queries_and_complete() -> None:
    rows = b05_long_runs.run_lengths([2, 5], budget=10)
    assert [row["steps"] for row in rows] == [2, 5]
    for row in rows:
        assert row["problems"] == []
        assert row["queries"] > 0
        assert sum(row["kinds_per_step"].values()) * row["steps"] == pytest.approx(
            row["queries"])


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_b08_b09_seed_and_requests_answer(monkeypatch, settings) -> None:
    """The scale benchmarks' seeding and requests, on 50 runs of the test database."""
    from benchmarks import surfaces

    settings.ROOT_URLCONF = "benchmarks.surface_urls"
    monkeypatch.setattr(surfaces, "REPEATS", 1)
    surfaces.seed(50)
    assert WorkflowRun.objects.count() == 51
    assert WorkflowStep.objects.filter(run_id=surfaces.big_run_id()).count() == 1000
    results = surfaces.measure({**b08_api_scale.requests(), **b09_console_scale.requests()})
    assert len(results) == 11 and all(r["queries"] > 0 for r in results.values())


@pytest.mark.django_db
def test_b10_graph_cycles_complete_every_round() -> None:
    rows = b10_graph_cycles.run_all_rounds([2, 5])
    assert [row["rounds"] for row in rows] == [2, 5]
    assert all(row["problems"] == [] and row["ms_per_round"] > 0 for row in rows)


# --- on RQ workers: PostgreSQL and Redis -----------------------------------------------------


@pytest.mark.postgres_only
def test_b02_b03_b04_on_two_pikku_workers(rq_ready: None) -> None:
    with workers(2, pikku_workflows=RQ_SETTINGS):
        flaky = b02_flaky.run_queued(runs=3, steps=4, timeout=60)
        assert flaky["problems"] == []
        assert flaky["steps"] == 12
        chained = b03_queued.run_ours(runs=2, steps=3, timeout=60)
        assert chained["problems"] == []
        fanned = b04_fanout.run_ours(6, timeout=60)
        assert fanned["problems"] == []


@pytest.mark.postgres_only
def test_b03_b04_plain_rq_peers(rq_ready: None) -> None:
    with workers(2, plain_rq=True):
        chained = b03_queued.run_plain_rq(chains=2, length=3, timeout=60)
        assert chained["problems"] == []
        joined = b04_fanout.run_plain_rq(6, timeout=60)
        assert joined["problems"] == []


@pytest.mark.postgres_only
def test_b06_b07_one_worker_wakes_every_sleeper_and_keeps_its_memory(rq_ready: None) -> None:
    pool: WorkerPool
    with workers(1, pikku_workflows=RQ_SETTINGS) as pool:
        pid = pool.procs[0].pid
        slept = b06_sleepers.run_sleepers(3, 0.5, pid, timeout=60)
        assert slept["problems"] == []
        assert slept["woke"] == 3
        assert slept["rss_end_mb"] > 0
        soaked = b07_soak.run_soak(8, 2, pid, budget_s=30)
        assert soaked["problems"] == []
        assert soaked["done"] == 8
