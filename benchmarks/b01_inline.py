"""B1: runs of 20 no-op inline steps on PostgreSQL and SQLite (WAL, and Django's default
rollback journal), ours vs DBOS."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    DATA_DIR,
    Section,
    Target,
    bench_args,
    check_runs,
    finish,
    ratio,
    run_part,
    setup_script_django,
)

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"runs": 3, "steps": 20, "warmup": 1},
    "full": {"runs": 100, "steps": 20, "warmup": 5},
}
PROFILE_RUNS = 30
SCRIPT = "b01_inline.py"
#: The databases of B1's rows, in order.
LABELS = {"postgres": "PostgreSQL", "sqlite": "SQLite (WAL)",
          "sqlite-rollback": "SQLite (rollback journal)"}


FLOOR_TABLE = "pikku_bench_floor"
FLOOR_COMMITS = {"tiny": 50, "full": 500}


def commit_floor(commits: int) -> float:
    """ms per single-row INSERT + COMMIT through Django's connection (autocommit: each
    statement its own transaction), on a table of its own in the benchmark database: the
    median over chunks of 25."""
    from django.db import connection

    key = ("id INTEGER PRIMARY KEY AUTOINCREMENT" if connection.vendor == "sqlite"
           else "id bigserial PRIMARY KEY")
    chunk = 25
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} ({key}, v integer)")
        cursor.execute(f"DELETE FROM {FLOOR_TABLE}")
        for i in range(50):  # warm-up
            cursor.execute(f"INSERT INTO {FLOOR_TABLE} (v) VALUES (%s)", [i])
        times = []
        for start in range(0, max(commits, chunk), chunk):
            started = time.perf_counter()
            for i in range(start, start + chunk):
                cursor.execute(f"INSERT INTO {FLOOR_TABLE} (v) VALUES (%s)", [i])
            times.append((time.perf_counter() - started) / chunk * 1000)
    # The median chunk: a commit's cost without the odd stall (a checkpoint, a neighbour).
    return sorted(times)[len(times) // 2]


def statements_per_step(steps: int) -> dict[str, float]:
    """Statements and round trips per step of an inline run, marginal (a run of
    ``2 * steps`` minus one of ``steps``, per step: the run's own start and end cancel
    out) and all in (one run of ``steps``, per step).

    Statements leave out BEGIN and COMMIT; round trips count them, logged (SQLite) or
    not (PostgreSQL, where a transaction opened by ``atomic`` costs both besides its
    statements). On SQLite a round trip is a call into the library, not the network.
    """
    from django.db import connection

    import pikku_workflows as pw
    from benchmarks.harness import count_queries

    def measure(length: int) -> tuple[int, int]:
        commits = [0]
        commit = connection.commit

        def counted() -> None:
            commits[0] += 1
            commit()

        connection.commit = counted  # type: ignore[method-assign]
        try:
            _, queries = count_queries(
                lambda: pw.start_workflow("bench_steps", {"steps": length}, inline=True))
        finally:
            del connection.commit
        words = [q.lstrip().split(None, 1)[0].upper() if q.strip() else "" for q in queries]
        begins, ends = words.count("BEGIN"), words.count("COMMIT")
        statements = len(queries) - begins - ends
        # Each commit had a BEGIN and a COMMIT, logged (SQLite) or not (PostgreSQL).
        return statements, len(queries) + max(0, commits[0] - begins) + max(
            0, commits[0] - ends)

    short, long = measure(steps), measure(2 * steps)
    return {"statements": (long[0] - short[0]) / steps,
            "round_trips": (long[1] - short[1]) / steps,
            "statements_all_in": short[0] / steps, "round_trips_all_in": short[1] / steps}


def run_ours(runs: int, steps: int, warmup: int = 0, floor_commits: int = 500
             ) -> dict[str, Any]:
    """``runs`` inline runs of ``steps`` no-op steps on the configured database, between
    two measurements of the commit floor.

    Returns:
        ``seconds``, ``steps``, ``ms_per_step``, ``floor_ms`` (one single-row commit, the
        mean of the measurements before and after), the ``statements`` and
        ``round_trips`` per step, and the correctness ``problems`` found.
    """
    import pikku_workflows as pw

    for _ in range(warmup):
        pw.start_workflow("bench_steps", {"steps": steps}, inline=True)
    floor_before = commit_floor(floor_commits)
    started = time.perf_counter()
    run_ids = [pw.start_workflow("bench_steps", {"steps": steps}, inline=True).pk
               for _ in range(runs)]
    seconds = time.perf_counter() - started
    floor_after = commit_floor(floor_commits)
    return {"seconds": seconds, "steps": runs * steps,
            "ms_per_step": seconds / (runs * steps) * 1000,
            "floor_ms": (floor_before + floor_after) / 2,
            "floor_ms_before_after": [floor_before, floor_after],
            **statements_per_step(steps),
            "problems": check_runs(run_ids, steps)}


def profile_ours(runs: int, steps: int) -> dict[str, Any]:
    """Profile ours with pyinstrument; write the full profile under ``.data/``.

    Returns:
        Self time by layer (engine, Django ORM, database driver...) and the hottest
        functions, as shares of the profiled time.
    """
    from pyinstrument import Profiler

    import pikku_workflows as pw

    pw.start_workflow("bench_steps", {"steps": steps}, inline=True)
    profiler = Profiler()
    profiler.start()
    for _ in range(runs):
        pw.start_workflow("bench_steps", {"steps": steps}, inline=True)
    profiler.stop()
    DATA_DIR.mkdir(exist_ok=True)
    path = DATA_DIR / "b01_profile.txt"
    path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    session = profiler.last_session
    assert session is not None
    root: Any = session.root_frame()
    by_layer: dict[str, float] = defaultdict(float)
    by_function: dict[str, float] = defaultdict(float)
    stack: list[Any] = [root]
    while stack:
        frame = stack.pop()
        stack.extend(frame.children)
        own = frame.total_self_time
        if own <= 0:
            continue
        # "[self]" and similar synthetic frames are their parent's own time.
        real = frame.parent if frame.is_synthetic and frame.parent is not None else frame
        by_layer[_layer(real.file_path or "")] += own
        by_function[f"{real.function} ({_short(real.file_path or '')})"] += own
    total = sum(by_layer.values()) or 1.0
    return {
        "ms_per_step": root.time / (runs * steps) * 1000,
        "layers": {k: v / total for k, v in sorted(by_layer.items(), key=lambda kv: -kv[1])},
        "functions": {k: v / total for k, v in
                      sorted(by_function.items(), key=lambda kv: -kv[1])[:15]},
        "path": str(path.relative_to(DATA_DIR.parents[1])),
    }


def _short(path: str) -> str:
    parts = Path(path).parts
    for anchor in ("site-packages", "main"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    return Path(path).name or path


def _layer(path: str) -> str:
    if "pikku_workflows" in path:
        return "pikku_workflows engine"
    if "/django/db/backends" in path:
        return "Django database backend"
    if "/django/db/models" in path or "/django/db/transaction" in path:
        return "Django ORM"
    if "/django/" in path:
        return "Django (other)"
    if "psycopg" in path or path.startswith("<built-in>") or not path:
        return "database driver and built-ins (incl. waiting on the server)"
    if "threading" in path:
        return "threads (lease keep-alive)"
    if "/uuid" in path or "/json" in path:
        return "uuid / json"
    return "other Python"


def part(name: str, db: str, size: str) -> dict[str, Any]:
    """One subprocess part: ``ours``, ``dbos`` or ``profile``, on ``db``."""
    sizes = SIZES[size]
    if name == "dbos":
        from benchmarks import dbos_peer

        dbos_peer.launch(db)
        try:
            return dbos_peer.run_steps(sizes["runs"], sizes["steps"], sizes["warmup"])
        finally:
            dbos_peer.shutdown()
    setup_script_django(db)
    if name == "profile":
        return profile_ours(min(PROFILE_RUNS, sizes["runs"]), sizes["steps"])
    return run_ours(sizes["runs"], sizes["steps"], sizes["warmup"], FLOOR_COMMITS[size])


def main() -> None:
    args = bench_args(__doc__ or "", ("ours", "dbos", "profile"), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B1", title="inline steps, ours vs DBOS", size=args.size,
        workload=(f"{sizes['runs']} runs x {sizes['steps']} no-op steps, one run after "
                  f"another in one process (after {sizes['warmup']} warm-up runs), "
                  "each side in its own fresh process and database on the same server"),
        columns=["database", "ours ms/step", "one commit ms (floor)", "ours / floor",
                 "statements / step", "round trips / step", "DBOS ms/step", "DBOS / ours"],
    )
    for db, label in LABELS.items():
        ours = run_part(SCRIPT, "ours", db=db, size=args.size)
        dbos = run_part(SCRIPT, "dbos", db=db, size=args.size)
        section.problems += [f"ours on {db}: {p}" for p in ours["problems"]]
        section.problems += [f"DBOS on {db}: {p}" for p in dbos["problems"]]
        speedup = ratio(dbos["ms_per_step"], ours["ms_per_step"])
        over_floor = ratio(ours["ms_per_step"], ours["floor_ms"])
        section.rows.append([label, ours["ms_per_step"], ours["floor_ms"], over_floor,
                             ours["statements"], ours["round_trips"], dbos["ms_per_step"],
                             speedup])
        if db != "sqlite-rollback":  # reported, not a target: docs/deploying.md says WAL
            section.targets.append(Target(f"ours / one single-row commit on {label}",
                                          over_floor, 2.5, "x"))
            section.targets.append(Target(f"DBOS / ours on {label}", speedup, 3.0, "x",
                                          ">="))
        section.notes.append(
            f"{label}: {ours['statements_all_in']:.2f} statements and "
            f"{ours['round_trips_all_in']:.2f} round trips per step all in (run start and "
            f"end included, {sizes['steps']}-step run); the floor measured "
            + " ms and ".join(f"{v:.3f}" for v in ours["floor_ms_before_after"])
            + " ms before and after ours.")
    profile = run_part(SCRIPT, "profile", db="postgres", size=args.size)
    section.notes.append(
        f"Profile of ours on PostgreSQL (pyinstrument, {min(PROFILE_RUNS, sizes['runs'])} "
        f"runs, {profile['ms_per_step']:.2f} ms/step under the profiler; full tree in "
        f"`{profile['path']}`). Self time by layer: " + ", ".join(
            f"{layer} {share:.0%}" for layer, share in profile["layers"].items()) + ".")
    section.notes.append("Hottest functions (self time): " + ", ".join(
        f"`{fn}` {share:.0%}" for fn, share in list(profile["functions"].items())[:8]) + ".")
    section.notes.append(
        "The floor: one single-row `INSERT` and its commit through Django's connection "
        f"(autocommit), {FLOOR_COMMITS[args.size]} times on a table of its own in the same "
        "database, in ours' process, right before and right after ours' runs (the median "
        "of chunks of 25 commits, then the mean of before and after). Statements and "
        "round trips per step are marginal: a run of twice the steps minus a run of the "
        "steps, per step, from Django's query log plus the BEGIN/COMMIT it does not log.")
    section.notes.append(
        "SQLite (WAL) runs with `journal_mode=WAL` and the default `synchronous` for both "
        "sides; SQLite (rollback journal) with Django's default settings (journal_mode "
        "DELETE) for both sides, in files of their own: what a project gets without the "
        "`init_command` of docs/deploying.md (`manage.py check` warns, "
        "pikku_workflows.W001); no targets for it. DBOS's system database is a fresh "
        "database (or file) of its own.")
    finish(section, args)


if __name__ == "__main__":
    main()
