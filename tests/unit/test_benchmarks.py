"""The benchmarks that run inline on any database, at a tiny size: their correctness checks,
never their speed (those on PostgreSQL, Redis and workers:
tests/integration/test_benchmarks_on_workers.py)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest

from benchmarks import (
    b01_inline,
    b02_flaky,
    b05_long_runs,
    b10_graph_cycles,
    b11_graph_layout,
    b13_schedules,
    b14_events,
)
from benchmarks.harness import check_runs
from pikku_workflows.models import StepAttempt
from pikku_workflows.registry import registry

RQ_SETTINGS = {"EXECUTOR": "rq", "DEFAULT_RETRY_DELAY": 0}


@pytest.fixture(autouse=True)
def bench_workflows() -> Iterator[None]:
    """The benchmark app's workflows, registered for this test only."""
    with registry.isolated():
        module = importlib.import_module("benchmarks.benchapp.workflows")
        importlib.reload(module)  # registers into the isolated registry
        yield


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


@pytest.mark.django_db
def test_b10_graph_cycles_complete_every_round() -> None:
    rows = b10_graph_cycles.run_all_rounds([2, 5])
    assert [row["rounds"] for row in rows] == [2, 5]
    assert all(row["problems"] == [] and row["ms_per_round"] > 0 for row in rows)


def test_b11_counts_crossings_for_both_layouts_and_times_one() -> None:
    graphs = b11_graph_layout.drawing_set(5, registered=False)
    result = b11_graph_layout.compare(graphs, with_dot=False)
    assert result["problems"] == []
    assert result["totals"]["random"]["graphs"] == 5
    source = b11_graph_layout.dot_source(graphs[0]).splitlines()
    assert sum("->" in line for line in source) == len(graphs[0]["edges"])
    assert sum("label=" in line for line in source) == sum(
        1 for e in graphs[0]["edges"] if e.get("label"))
    median, best, edges = b11_graph_layout.layout_ms(40, 2)
    assert 0 < best <= median and edges > 40


def test_b01_runs_on_sqlite_with_the_rollback_journal_in_a_file_of_its_own() -> None:
    """B1's rows on SQLite in both journal modes: the rollback-journal part (what a
    project gets with Django's default settings) runs and keeps its own file in that
    mode, beside the WAL one."""
    from benchmarks.harness import DATA_DIR, run_part

    assert list(b01_inline.LABELS) == ["postgres", "sqlite", "sqlite-rollback"]
    result = run_part("b01_inline.py", "ours", db="sqlite-rollback", size="tiny")
    assert result["problems"] == [] and result["ms_per_step"] > 0
    header = (DATA_DIR / "pikku_bench_rollback.sqlite3").read_bytes()[:20]
    assert header[18:20] == b"\x01\x01"  # a rollback journal, not WAL (2, 2)


@pytest.mark.django_db
def test_b13_a_scheduler_pass_reads_only_due_schedules_and_batches_its_ticks() -> None:
    result = b13_schedules.pass_cost("tiny")
    sizes = b13_schedules.SIZES["tiny"]
    assert result["schedules"] == sizes["spread"] + sizes["burst"]
    idle, spread, burst = result["idle"], result["spread_second"], result["burst"]
    # No scan of the schedules: one indexed query per kind of due thing (waits, deadlines,
    # delayed starts, buffered ticks, queued concurrency slots, schedules).
    assert idle["ticks"] == 0 and idle["queries"] <= 6
    # The burst's second: its schedules and that second's share of the spread load.
    assert burst["ticks"] == burst["runs"] >= sizes["burst"]
    assert spread["ticks"] == spread["runs"] >= 1
    # The ticks of a pass are written together: the burst's 16 times as many cost the
    # queries of the spread second's few (both fit in one batch at this size), give or
    # take one read of a cached setting (the limits' overrides, every two seconds).
    assert burst["ticks"] >= 16 * spread["ticks"]
    assert abs(burst["queries"] - spread["queries"]) <= 1, (spread, burst)


@pytest.mark.django_db
def test_b14_send_event_makes_the_same_queries_with_ten_times_more_runs_waiting(
        monkeypatch) -> None:
    """B14's cost part, smaller: its sends wake exactly the run waiting on their key."""
    monkeypatch.setitem(b14_events.SIZES, "tiny",
                        {**b14_events.SIZES["tiny"], "waiters": 4, "sends": 3})
    result = b14_events.cost("tiny")
    assert result["problems"] == []
    assert (result["1x"]["waiters"], result["10x"]["waiters"]) == (4, 40)
    for kind in ("nobody", "one"):
        few, many = result["1x"][kind], result["10x"][kind]
        assert few["queries_min"] == few["queries_max"] == many["queries_max"] > 0, kind
    assert result["10x"]["one"]["woken"] == 3 and result["10x"]["nobody"]["woken"] == 0


def test_b16_runs_steps_under_each_kind_of_limit_and_counts_their_statements() -> None:
    from benchmarks import b16_step_limits
    from benchmarks.harness import run_part
    from benchmarks.run_all import SCRIPTS

    assert SCRIPTS["B16"] == "b16_step_limits.py"
    result = run_part("b16_step_limits.py", "ours", db="sqlite", size="tiny")
    assert result["problems"] == []
    assert set(result["ms_per_step"]) == set(b16_step_limits.KINDS)
    per_step = result["statements_per_step"]
    # A concurrency limit: a take, a give-back and the wake-up of a waiter (one statement
    # with the give-back on PostgreSQL, its own on SQLite); a rate: a take.
    # (Plus, at times, the overrides' read, at most once every two seconds per process, and
    # a rate's new slot rows, 32 at a time: a fraction of a statement per step.)
    assert 3 <= per_step["concurrency"] - per_step["none"] <= 3.25
    assert 1 <= per_step["rate"] - per_step["none"] <= 1.25
