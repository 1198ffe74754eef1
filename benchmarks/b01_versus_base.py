"""B1 against an earlier commit: is a step slower than before? The same B1 runs of ours,
at this checkout and at ``BASE``, alternating in the same run."""

from __future__ import annotations

import os
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    DATA_DIR,
    POSTGRES_SERVER,
    ROOT,
    Section,
    Target,
    bench_args,
    bench_env,
    ensure_postgres_database,
    finish,
    ratio,
    run_part,
)

#: The last commit before the engine hardening of issue 23 (0.1.0's checks, limits,
#: lifecycle and mirror outbox), whose B1 the hardening must not slow down. Another commit
#: with ``PIKKU_BENCH_BASE`` (the store's split into a unit of work was measured against
#: 1184418, its parent).
BASE = os.environ.get("PIKKU_BENCH_BASE", "a4abcf8")
ROUNDS = {"tiny": 1, "full": 4}
DATABASES = {"postgres": "PostgreSQL", "sqlite": "SQLite (WAL)"}


def _tree(commit: str) -> Path | None:
    """A checkout of ``commit`` under ``.data/`` (a git worktree), or None when this clone
    does not have the commit (a shallow clone)."""
    tree = DATA_DIR / f"base-{commit}"
    if (tree / "pikku_workflows").is_dir():
        return tree
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                           capture_output=True, check=False)
    if known.returncode != 0:
        return None
    DATA_DIR.mkdir(exist_ok=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), commit],
                   cwd=ROOT, check=True, capture_output=True)
    return tree


def _b1_ours(tree: Path, db: str, size: str, name: str) -> dict[str, Any]:
    """B1's ``ours`` part of the checkout ``tree`` in a fresh process, on a database (or
    SQLite file) of that checkout's own: their migrations differ."""
    env = bench_env(db, PIKKU_BENCH_POSTGRES_URL=f"{POSTGRES_SERVER}/{name}",
                    PIKKU_BENCH_SQLITE_PATH=str(DATA_DIR / f"{name}.sqlite3"),
                    PYTHONPATH=str(tree))
    return run_part("b01_inline.py", "ours", db=db, size=size, tree=tree, env=env)


def _medians(results: dict[str, list[dict[str, Any]]], *, per_floor: bool = False
             ) -> Callable[[str, str], float]:
    """The median of a result key of one side over the rounds (each divided by its own
    process's commit floor when ``per_floor``)."""
    def median(side: str, key: str) -> float:
        return float(statistics.median(r[key] / (r["floor_ms"] if per_floor else 1)
                                       for r in results[side]))
    return median


def main() -> None:
    args = bench_args(__doc__ or "", (), lambda *_: {})
    if args is None:
        return
    rounds = ROUNDS[args.size]
    section = Section(
        bench="B1-base", title=f"inline steps, this checkout vs commit {BASE}",
        size=args.size,
        workload=(f"B1's runs of ours ({args.size}), {rounds} rounds alternating base and "
                  "this checkout, each in a fresh process on a database of its own; "
                  "medians over the rounds"),
        columns=["database", "base ms/step", "now ms/step", "now / base",
                 "base / floor", "now / floor", "base statements / step",
                 "now statements / step"],
    )
    base = _tree(BASE)
    if base is None:
        section.notes.append(f"Not measured: this clone does not have commit {BASE}.")
        finish(section, args)
        return
    ensure_postgres_database("pikku_bench_base")
    ensure_postgres_database("pikku_bench_now")
    for db, label in DATABASES.items():
        results: dict[str, list[dict[str, Any]]] = {"base": [], "now": []}
        for _ in range(rounds):
            results["base"].append(_b1_ours(base, db, args.size, "pikku_bench_base"))
            results["now"].append(_b1_ours(ROOT, db, args.size, "pikku_bench_now"))
        median = _medians(results)
        over_floor = _medians(results, per_floor=True)
        slower = ratio(over_floor("now", "ms_per_step"), over_floor("base", "ms_per_step"))
        section.rows.append([label, median("base", "ms_per_step"),
                             median("now", "ms_per_step"),
                             ratio(median("now", "ms_per_step"), median("base", "ms_per_step")),
                             over_floor("base", "ms_per_step"),
                             over_floor("now", "ms_per_step"),
                             median("base", "statements"), median("now", "statements")])
        section.targets.append(Target(f"(now / floor) / (base / floor) on {label}", slower,
                                      1.05, "x"))
        section.targets.append(Target(f"statements per step, now - base, on {label}",
                                      median("now", "statements") - median("base",
                                                                           "statements"),
                                      0))
    section.notes.append(
        "Ratios are over each process's own commit floor (B1's), so a busier machine in one "
        "round shifts both sides alike; a step is slower only beyond the 5 % noise these "
        "rounds show, or when it issues more statements.")
    finish(section, args)


if __name__ == "__main__":
    main()
