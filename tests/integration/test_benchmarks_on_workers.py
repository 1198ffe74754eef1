"""The benchmarks that need PostgreSQL (B8/B9's seeding) or Redis and workers (B2-B4,
B6-B7), at a tiny size: their correctness checks, never their speed. The inline ones are
in tests/unit/test_benchmarks.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from benchmarks import (
    b02_flaky,
    b03_queued,
    b04_fanout,
    b06_sleepers,
    b07_soak,
    b08_api_scale,
    b09_console_scale,
    b14_events,
    b17_dashboard,
)
from benchmarks.harness import WorkerPool, flush_redis, workers
from pikku_workflows.models import WorkflowRun, WorkflowStep
from tests.services import unavailable
from tests.unit.test_benchmarks import bench_workflows  # noqa: F401 - an autouse fixture

RQ_SETTINGS = {"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0}


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
    requests = {**b08_api_scale.requests(), **b09_console_scale.requests()}
    assert len(requests) >= 15  # B8's and B9's, content search included
    results = surfaces.measure(requests)
    assert set(results) == set(requests) and all(r["queries"] > 0 for r in results.values())


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_b17_dashboard_window_holds_the_seed(monkeypatch, settings) -> None:
    """B17's clock lands the dashboard's window on the seeded runs, and its requests
    answer (the dashboard drawing the seed's counts)."""
    from benchmarks import surfaces
    from pikku_workflows.testing import fake_clock

    settings.ROOT_URLCONF = "benchmarks.surface_urls"
    monkeypatch.setattr(surfaces, "REPEATS", 1)
    surfaces.seed(50)
    now = b17_dashboard.seeded_now()
    facts = b17_dashboard.window_facts(now)
    assert facts["created"] == 51 and facts["failed attempts"] > 0
    with fake_clock(now):
        results = surfaces.measure(b17_dashboard.requests())
    assert set(results) == set(b17_dashboard.requests())
    assert all(r["queries"] > 0 for r in results.values())


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


@pytest.mark.postgres_only
def test_b14_every_waiting_run_is_woken_by_its_event_on_two_workers(rq_ready: None) -> None:
    """B14's wake part at its tiny size (it starts its own two workers)."""
    result = b14_events.wake("tiny")
    runs = b14_events.SIZES["tiny"]["runs"]
    assert result["problems"] == []
    assert result["not_woken"] == 0 and result["measured"] == runs
    assert result["p99"] >= result["p50"] > 0
