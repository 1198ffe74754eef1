"""``make soak``: the chaos scenario at full size, its figures written into RELIABILITY.md.

Not collected by ``make test`` (the file name has no ``test_`` prefix); ``make soak`` runs
it by path. ``PIKKU_SOAK_RUNS`` (default 10,000) and ``PIKKU_SOAK_WORKERS`` (default 4)
size it, ``PIKKU_SOAK_IN_FLIGHT`` (default 200) caps the runs unfinished at a time (a new
one starts as one ends); a worker is SIGKILLed every ``PIKKU_SOAK_KILL_EVERY`` seconds
(default 5).
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

from .chaos import run_chaos

RELIABILITY = Path(__file__).resolve().parents[2] / "RELIABILITY.md"
BEGIN, END = "<!-- soak:begin -->", "<!-- soak:end -->"


def test_soak(workers):
    runs = int(os.environ.get("PIKKU_SOAK_RUNS", "10000"))
    count = int(os.environ.get("PIKKU_SOAK_WORKERS", "4"))
    kill_every = float(os.environ.get("PIKKU_SOAK_KILL_EVERY", "5"))
    in_flight = int(os.environ.get("PIKKU_SOAK_IN_FLIGHT", "200"))
    report = run_chaos(workers, runs=runs, workers=count, kill_every=kill_every,
                       kill_for=6 * 3600, settle_timeout=600, in_flight=in_flight)
    summary = report.summary()
    print(json.dumps(summary))
    assert report.problems == []
    write_figures(summary, kill_every, in_flight)


def write_figures(summary: dict, kill_every: float, in_flight: int) -> None:
    """Replace the figures between the soak markers of RELIABILITY.md."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        BEGIN,
        f"Last `make soak`: {when}, {summary['runs']:,} `fault_order` runs on "
        f"{summary['workers']} `pikku_worker` processes, one of them SIGKILLed (and "
        f"restarted) every {kill_every:g} s, at most {in_flight} runs unfinished at a time "
        "(a new one starts as one ends), on this project's 2-core CI machine (PostgreSQL "
        "and Redis on the same machine, the settings of the fault tests: "
        "`LEASE_TIMEOUT=2s`, `STALLED_AFTER=3s`, sweeps every second).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| runs, all completed with the right output | {summary['runs']:,} |",
        "| ledger rows (one per atomic step), doubled or missing | 0 |",
        f"| wall time | {summary['seconds']:,} s |",
        f"| runs/s | {summary['runs_per_second']} |",
        f"| workers killed | {summary['kills']} |",
        f"| attempts lost with a killed worker (failed as `WorkerLost`, retried) "
        f"| {summary['lost_attempts']} |",
        f"| recovery time after a kill, median / max | {summary['recovery_seconds_p50']} s / "
        f"{summary['recovery_seconds_max']} s |",
        f"| run latency (created to finished), median / p99 | {summary['run_latency_p50']} s / "
        f"{summary['run_latency_p99']} s |",
        END,
    ]
    text = RELIABILITY.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    RELIABILITY.write_text(pattern.sub(lambda _: "\n".join(lines), text))
