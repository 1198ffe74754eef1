"""Shared machinery of the benchmarks: databases, workers, process memory, results, tables."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.processes import WorkerProcesses, wait_until

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "benchmarks"
DATA_DIR = BENCH_DIR / ".data"
PYTHON = sys.executable
SETTINGS_MODULE = "benchmarks.settings"
POSTGRES_SERVER = "postgres://root@127.0.0.1:5432"
BENCH_DATABASE = "pikku_bench"
DBOS_DATABASE = "pikku_bench_dbos"
BENCH_REDIS_URL = "redis://127.0.0.1:6379/14"
# The line a part subprocess prints its JSON result after.
RESULT_MARK = "@@BENCH-RESULT@@ "


# --- results -------------------------------------------------------------------------


@dataclass
class Target:
    """One target of a benchmark: ``measured`` compared with ``limit``."""

    name: str
    measured: float
    limit: float
    unit: str = ""
    # "<=": lower is better; ">=": higher is better.
    op: str = "<="

    @property
    def met(self) -> bool:
        return self.measured <= self.limit if self.op == "<=" else self.measured >= self.limit

    def verdict(self) -> str:
        """``met`` or ``missed`` with how far off the limit the measurement is."""
        if self.met:
            return "met"
        if self.limit == 0:
            return "missed"
        factor = self.measured / self.limit if self.op == "<=" else self.limit / max(
            self.measured, 1e-12)
        return f"missed ({factor:.2f}x off)"


@dataclass
class Section:
    """What one benchmark reports: a table, its targets and notes."""

    bench: str
    title: str
    size: str
    workload: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Section:
        targets = [Target(**t) for t in data.pop("targets", [])]
        return cls(targets=targets, **data)

    def markdown(self) -> str:
        """The section as markdown: heading, workload, table, targets, notes."""
        lines = [f"## {self.bench}: {self.title}", "", f"Workload ({self.size}): {self.workload}",
                 ""]
        lines += markdown_table(self.columns, self.rows)
        if self.targets:
            lines += ["", *markdown_table(
                ["target", "measured", "limit", "verdict"],
                [[t.name, f"{fmt(t.measured)} {t.unit}".strip(),
                  f"{t.op} {fmt(t.limit)} {t.unit}".strip(), t.verdict()]
                 for t in self.targets])]
        if self.problems:
            lines += ["", "**Correctness problems:**", ""]
            lines += [f"- {p}" for p in self.problems]
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        lines += ["", f"_Benchmark wall time: {self.seconds:.0f} s._", ""]
        return "\n".join(lines)


def fmt(value: Any) -> str:
    """A number with sensible precision; anything else as text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def markdown_table(columns: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(cell) for cell in row) + " |" for row in rows]
    return lines


def ratio(a: float, b: float) -> float:
    """``a / b``, or infinity when ``b`` is zero."""
    return a / b if b else float("inf")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


# --- command line and part subprocesses ---------------------------------------------------


#: The databases a part can run on: ``sqlite`` is in WAL mode, ``sqlite-rollback`` keeps
#: Django's default rollback journal (B1 reports both).
DATABASES = ("postgres", "sqlite", "sqlite-rollback")
#: A file per SQLite journal mode (the mode persists in the file).
SQLITE_FILES = {"sqlite-rollback": "pikku_bench_rollback.sqlite3"}


def parse_args(description: str, parts: Iterable[str] = ()) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", choices=("tiny", "full"), default="full")
    parser.add_argument("--json", metavar="PATH", help="also write the section as JSON here")
    parser.add_argument("--part", choices=sorted(parts) or None, help=argparse.SUPPRESS)
    parser.add_argument("--db", choices=DATABASES, default="postgres",
                        help=argparse.SUPPRESS)
    return parser.parse_args()


def bench_env(db: str = "postgres", **extra: str) -> dict[str, str]:
    """The environment of a benchmark subprocess using ``benchmarks.settings`` on ``db``."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        PIKKU_BENCH_DB=db,
        PIKKU_BENCH_POSTGRES_URL=f"{POSTGRES_SERVER}/{BENCH_DATABASE}",
        PIKKU_BENCH_SQLITE_PATH=str(DATA_DIR / SQLITE_FILES.get(db, "pikku_bench.sqlite3")),
        PIKKU_BENCH_REDIS_URL=BENCH_REDIS_URL,
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def run_part(script: str, part: str, *, db: str = "postgres", size: str = "full",
             timeout: float = 900, tree: Path = ROOT, env: dict[str, str] | None = None
             ) -> dict[str, Any]:
    """Run ``script --part part`` in a fresh process and return the JSON it reports.

    Each part gets its own process so that peers never share an interpreter, threads
    or connection pools with the side being measured. ``tree``: the checkout whose
    script runs (B1-base runs an earlier commit's); ``env``: its environment (default
    ``bench_env(db)``).
    """
    proc = subprocess.run(
        [PYTHON, str(tree / "benchmarks" / script), "--part", part, "--db", db,
         "--size", size],
        env=bench_env(db) if env is None else env, cwd=tree, capture_output=True,
        text=True, timeout=timeout, check=False,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    raise RuntimeError(
        f"{script} --part {part} --db {db} failed (exit {proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )


def report_part(result: dict[str, Any]) -> None:
    """Print a part's result where ``run_part`` finds it."""
    print(RESULT_MARK + json.dumps(result), flush=True)


def bench_args(description: str, parts: Iterable[str],
               part: Callable[[str, str, str], dict[str, Any]]) -> argparse.Namespace | None:
    """A benchmark script's command line, its clock started.

    When it names one of ``parts`` (the harness runs each side in a process of its own),
    runs ``part(name, db, size)``, reports the result and returns None.
    """
    args = parse_args(description, parts)
    if args.part:
        report_part(part(args.part, args.db, args.size))
        return None
    args.started = time.monotonic()
    return args


def finish(section: Section, args: argparse.Namespace) -> None:
    """Print the section; write its JSON if asked; exit non-zero on correctness problems."""
    section.seconds = time.monotonic() - args.started
    print(section.markdown())
    if args.json:
        Path(args.json).write_text(json.dumps(section.to_json(), indent=1))
    if section.problems:
        sys.exit(1)


# --- Django, databases and Redis -----------------------------------------------------------


def ensure_postgres_database(name: str, *, fresh: bool = False) -> None:
    """Create PostgreSQL database ``name`` on the benchmark server if missing (or anew)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True) as conn:
        if fresh:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_script_django(db: str) -> None:
    """Configure Django on the benchmark database: created, migrated, emptied."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    DATA_DIR.mkdir(exist_ok=True)
    if db == "postgres":
        ensure_postgres_database(BENCH_DATABASE)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    reset_tables()


def reset_tables() -> None:
    """Empty every table of the app (runs, steps, schedules, events, limits...).

    All of them: a benchmark's leftovers (B13's 11,000 schedules) would otherwise keep
    firing in the next benchmark's workers.
    """
    from django.apps import apps
    from django.db import connection, transaction

    tables = [m._meta.db_table for m in apps.get_app_config("pikku_workflows").get_models()
              if m._meta.managed and not m._meta.proxy]
    # One transaction on SQLite: its foreign keys are deferred to the commit, so the
    # tables may be emptied in any order (one DELETE per commit failed on a child row).
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
        else:
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def redis_url() -> str:
    """The Redis URL of the configured ``RQ_QUEUES`` connection pikku uses."""
    from django.conf import settings

    from pikku_workflows.conf import pikku_settings

    queues: Any = settings.RQ_QUEUES
    return queues[pikku_settings.RQ_CONNECTION]["URL"]


def redis_connection() -> Any:
    from pikku_workflows.executors.rq import connection

    return connection()


def flush_redis() -> None:
    redis_connection().flushdb()


def count_queries(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn`` and return its result and the SQL of every query it made.

    An execute wrapper, not Django's query log: the log keeps only the last 9,000
    queries, so a long pass's capture came back empty once it had filled up.
    """
    from django.db import connection

    seen: list[str] = []

    def wrapper(execute: Any, sql_text: str, params: Any, many: bool,
                context: Any) -> Any:
        seen.append(sql_text)
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(wrapper):
        result = fn()
    return result, seen


def query_kinds(queries: list[str]) -> dict[str, int]:
    """Queries by their first SQL word (SELECT, INSERT, UPDATE, SAVEPOINT...)."""
    kinds: dict[str, int] = {}
    for sql_text in queries:
        word = sql_text.lstrip().split(None, 1)[0].upper() if sql_text.strip() else "?"
        kinds[word] = kinds.get(word, 0) + 1
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


# --- processes -----------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` (kB) and ``Threads`` of a process, from ``/proc/<pid>/status``."""
    values: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return values
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "Threads"):
            values[key] = int(rest.split()[0])
    return values


def rss_mb(pid: int) -> float:
    return proc_status(pid).get("VmRSS", 0) / 1024


def children_of(pid: int) -> list[int]:
    """The direct child processes of ``pid`` (RQ forks its scheduler as one)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # The command name is parenthesized and may contain spaces: split after it.
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


class WorkerPool(WorkerProcesses):
    """``pikku_worker`` and plain RQ worker subprocesses on the configured database and Redis.

    The workers use ``benchmarks.settings`` pointed at whatever database Django is
    configured with in this process (the benchmark database, or pytest's test database).
    """

    def __init__(self, pikku_workflows: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.pikku_workflows = pikku_workflows

    def env(self) -> dict[str, str]:
        from django.conf import settings
        from django.db import connection

        database = connection.settings_dict
        env = bench_env(
            "postgres" if connection.vendor == "postgresql" else "sqlite",
            PIKKU_BENCH_REDIS_URL=redis_url(),
            PIKKU_BENCH_WORKFLOWS_JSON=json.dumps(
                self.pikku_workflows if self.pikku_workflows is not None
                else getattr(settings, "PIKKU_WORKFLOWS", {})),
        )
        if connection.vendor == "postgresql":
            auth = database["USER"] or "root"
            if database.get("PASSWORD"):
                auth += f":{database['PASSWORD']}"
            env["PIKKU_BENCH_POSTGRES_URL"] = (
                f"postgres://{auth}@{database['HOST'] or '127.0.0.1'}:"
                f"{database['PORT'] or 5432}/{database['NAME']}")
        else:
            env["PIKKU_BENCH_SQLITE_PATH"] = str(database["NAME"])
        return env

    def start_pikku(self, count: int, *, sweep_interval: float = 5) -> list[subprocess.Popen]:
        """Start ``count`` ``manage.py pikku_worker`` processes; wait until they listen."""
        return self.spawn([PYTHON, str(ROOT / "manage.py"), "pikku_worker",
                            "--sweep-interval", str(sweep_interval)], count)

    def start_plain_rq(self, count: int, queue: str) -> list[subprocess.Popen]:
        """Start ``count`` plain ``rq worker`` processes (non-forking ``SimpleWorker``)."""
        return self.spawn([PYTHON, "-m", "rq.cli", "worker", "-w", "rq.worker.SimpleWorker",
                            "-S", "json", "--url", redis_url(), "--logging_level", "WARNING",
                            queue], count)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def workers(count: int, *, plain_rq: bool = False,
            pikku_workflows: dict[str, Any] | None = None) -> Iterator[WorkerPool]:
    """``count`` running workers (``pikku_worker``, or plain RQ) on a flushed Redis db."""
    from benchmarks.rq_jobs import QUEUE

    flush_redis()
    pool = WorkerPool(pikku_workflows)
    try:
        if plain_rq:
            pool.start_plain_rq(count, QUEUE)
        else:
            pool.start_pikku(count)
        yield pool
    except BaseException:
        sys.stderr.write(pool.output()[-5000:])
        raise
    finally:
        pool.close()


# --- the ledger of runs ----------------------------------------------------------------------


def wait_for_runs(run_ids: list[Any], *, timeout: float, interval: float | None = None) -> float:
    """Wait until every run in ``run_ids`` is terminal.

    Returns:
        The moment (epoch seconds) the last of them finished, from its ``finished_at``.
    """
    from django.db.models import Max

    from pikku_workflows.models import WorkflowRun
    from pikku_workflows.status import RunStatus

    terminal = RunStatus.terminal()
    # Polling must not load the database it measures: sparser for many runs.
    pause = interval if interval is not None else (0.02 if len(run_ids) <= 100 else 0.25)
    runs = WorkflowRun.objects.filter(pk__in=run_ids)
    wait_until(lambda: runs.filter(status__in=terminal).count() == len(run_ids),
               timeout=timeout, interval=pause, what=f"{len(run_ids)} runs finishing")
    last = runs.aggregate(last=Max("finished_at"))["last"]
    return last.timestamp() if last is not None else time.time()


def check_runs(run_ids: list[Any], expected_steps: int | Callable[[Any], int],
               expected_attempts: Callable[[Any, str], int] | None = None) -> list[str]:
    """Check finished runs: completed, each step succeeded once, attempts as planned.

    Args:
        run_ids: The runs to check.
        expected_steps: Step rows each run must have (or a function of the run input).
        expected_attempts: Attempts a step must have taken, from (run input, step name);
            default 1.

    Returns:
        The problems found (empty when all is well).
    """
    from django.db.models import Count, Q

    from pikku_workflows.models import StepAttempt, WorkflowRun, WorkflowStep
    from pikku_workflows.status import RunStatus, StepStatus

    problems: list[str] = []
    runs = {r.pk: r for r in WorkflowRun.objects.filter(pk__in=run_ids)}
    missing = len(run_ids) - len(runs)
    if missing:
        problems.append(f"{missing} runs are missing")
    not_done = [r for r in runs.values() if r.status != RunStatus.COMPLETED]
    if not_done:
        sample = ", ".join(f"{r.pk} {r.status} {r.error}" for r in not_done[:3])
        problems.append(f"{len(not_done)} of {len(runs)} runs did not complete: {sample}")
    steps = (
        WorkflowStep.objects.filter(run_id__in=run_ids)
        .annotate(succeeded=Count("attempts", filter=Q(attempts__status=StepStatus.SUCCEEDED)),
                  tried=Count("attempts"))
        .values_list("run_id", "step_name", "status", "attempt_count", "succeeded", "tried")
    )
    per_run: dict[Any, int] = {}
    bad: list[str] = []
    for run_id, name, status, attempt_count, succeeded, tried in steps:
        per_run[run_id] = per_run.get(run_id, 0) + 1
        if status != StepStatus.SUCCEEDED or succeeded != 1 or tried != attempt_count:
            bad.append(f"{run_id}/{name}: {status}, {succeeded} successes, {tried} attempts")
            continue
        if expected_attempts is not None and runs.get(run_id) is not None:
            want = expected_attempts(runs[run_id].input, name)
            if attempt_count != want:
                bad.append(f"{run_id}/{name}: {attempt_count} attempts, planned {want}")
    if bad:
        problems.append(f"{len(bad)} steps not recorded exactly once as planned: {bad[:3]}")
    for run_id, run in runs.items():
        want = expected_steps(run.input) if callable(expected_steps) else expected_steps
        if per_run.get(run_id, 0) != want:
            problems.append(f"run {run_id} has {per_run.get(run_id, 0)} steps, expected {want}")
            break
    # Attempt rows must match the step rows' counters exactly (no lost or extra rows).
    total = StepAttempt.objects.filter(step__run_id__in=run_ids).count()
    counted = sum(row[3] for row in steps)
    if total != counted:
        problems.append(f"{total} attempt rows but the steps count {counted} attempts")
    return problems


def attempts_of(run_ids: list[Any]) -> tuple[int, int]:
    """(step rows, attempt rows) of the runs."""
    from pikku_workflows.models import StepAttempt, WorkflowStep

    return (WorkflowStep.objects.filter(run_id__in=run_ids).count(),
            StepAttempt.objects.filter(step__run_id__in=run_ids).count())


# --- the machine and versions ------------------------------------------------------------------


def machine() -> dict[str, str]:
    """nproc, memory and CPU model of this machine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return {"nproc": str(os.cpu_count()), "memory": memory, "cpu": cpu,
            "kernel": platform.release()}


def versions() -> dict[str, str]:
    """Versions of Python, Django, RQ, django-rq, DBOS, PostgreSQL and Redis."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"Python": platform.python_version()}
    for package in ("django", "rq", "django-rq", "dbos", "psycopg", "redis"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    try:
        import psycopg

        with psycopg.connect(f"{POSTGRES_SERVER}/postgres") as conn:
            row = conn.execute("SHOW server_version").fetchone()
            found["PostgreSQL server"] = row[0] if row else "?"
    except Exception as exc:
        found["PostgreSQL server"] = f"unreachable ({exc.__class__.__name__})"
    try:
        import redis

        found["Redis server"] = redis.Redis.from_url(BENCH_REDIS_URL).info()["redis_version"]
    except Exception as exc:
        found["Redis server"] = f"unreachable ({exc.__class__.__name__})"
    import sqlite3

    found["SQLite"] = sqlite3.sqlite_version
    return found
