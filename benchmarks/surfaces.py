"""Seeding and measuring for B8 (REST API) and B9 (console) at 1,000 and 1,000,000 runs.

Runs, steps and users are inserted with ``INSERT ... SELECT generate_series`` into a
PostgreSQL database per size (``pikku_bench_surfaces_1k``, ``_1m``; the 1M one is kept and
reused when it already holds the right rows, so a second ``make bench`` seeds nothing).
Requests go through Django's test client in-process, signed in, with the settings a
project would have (``benchmarks/surface_settings.py``: DEBUG off, persistent
connections); each is warmed up, then timed ``REPEATS`` times; its queries are counted
on one more request.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

from benchmarks.harness import ensure_postgres_database, percentile

WORKFLOWS = 20
USERS = 1000
STEPS_PER_RUN = 5
BIG_RUN_STEPS = 1000
# A p95 of 60 timings was their third largest, and moved by half from run to run.
REPEATS = 150
SIZES = {"1k": 1_000, "1m": 1_000_000}
DATABASE = "pikku_bench_surfaces_{}"
# Run i's status: 60 % completed, 10 % failed, 20 % suspended (half of them at an approval
# gate), 10 % running: at 1,000 runs every triage list still fills a page of 100, so both
# sizes render the same pages.
STATUS_SQL = """CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 IN (1, 2) THEN 'suspended'
                     WHEN i % 10 = 3 THEN 'running' ELSE 'completed' END"""
ERROR_SQL = """CASE WHEN i % 10 = 0 THEN
    '{"code": "STEP_FAILED", "message": "step ''Step 4'' failed: boom", "step": "Step 4"}'::jsonb
  WHEN i % 10 = 1 THEN '{"code": "WAITING_FOR_APPROVAL", "message": "Manager sign-off",
    "step": "__workflow_approval:Manager sign-off"}'::jsonb
  WHEN i % 10 = 2 THEN '{"code": "WORKFLOW_SUSPENDED", "message": "Awaiting warehouse",
    "step": "__workflow_suspend:Awaiting warehouse"}'::jsonb END"""

#: Run i's input, for the content searches: its order id (one run each) and a customer
#: email one run in 1,000 shares (1,000 runs at a million, one at a thousand).
INPUT_SQL = """jsonb_build_object('i', i, 'order_id', i, 'customer',
    jsonb_build_object('email', 'user' || (i % 1000) || '@example.com'))"""
#: Bumped when the seeded shape changes: a database seeded otherwise is seeded again.
SHAPE = "v4"


def setup(size: str) -> None:
    """Django on the size's database, migrated and seeded (reused if already seeded)."""
    name = DATABASE.format(size)
    os.environ["PIKKU_SURFACE_DB"] = name
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.surface_settings"
    ensure_postgres_database(name)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from pikku_workflows.models import WorkflowRun

    if WorkflowRun.objects.filter(workflow="bench_big", wire={"shape": SHAPE}).exists() and \
            WorkflowRun.objects.order_by().count() == SIZES[size] + 1:
        return
    started = time.monotonic()
    seed(SIZES[size])
    print(f"seeded {SIZES[size]} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)


def seed(runs: int) -> None:
    from django.db import connection

    # 100 runs per owner at 1,000 runs, 1,000 at a million: an owner's list is a full page.
    owners = max(1, min(USERS, runs // 100))
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pikku_workflows_stepattempt, pikku_workflows_workflowstep, "
                       "pikku_workflows_workflowrun CASCADE")
        cursor.execute("DELETE FROM auth_user WHERE username LIKE 'bench\\_%%'")
        cursor.execute(f"""INSERT INTO auth_user (password, is_superuser, username, first_name,
            last_name, email, is_staff, is_active, date_joined)
            SELECT '!', false, 'bench_' || i, '', '', '', i = 0, true, now()
            FROM generate_series(0, {USERS}) AS i""")
        cursor.execute("SELECT min(id) FROM auth_user WHERE username LIKE 'bench\\_%%'")
        first_user = cursor.fetchone()[0]
        cursor.execute(f"""INSERT INTO pikku_workflows_workflowrun (id, workflow, status, input,
            output, error, state, inline, graph_hash, deterministic, planned_steps, wire,
            owner_id, idempotency_key, lease_owner, created_at, updated_at, finished_at)
            SELECT md5('run' || i)::uuid, 'bench_wf_' || (i % {WORKFLOWS}), {STATUS_SQL},
              {INPUT_SQL}, '{{"ok": true}}'::jsonb, {ERROR_SQL}, '{{}}'::jsonb,
              false, 'abcdef123456', true, '[]'::jsonb, '{{"type": "python"}}'::jsonb,
              {first_user} + 1 + (i % {owners}), NULL, '',
              now() - make_interval(secs => i * 30), now() - make_interval(secs => i * 30),
              CASE WHEN i % 10 IN (1, 2, 3) THEN NULL
                   ELSE now() - make_interval(secs => i * 30 - 2) END
            FROM generate_series(1, {runs}) AS i""")
        cursor.execute(f"""INSERT INTO pikku_workflows_workflowstep (run_id, step_name, rpc_name,
            data, status, result, attempt_count, attempt_base, retries, retry_delay,
            created_at, updated_at)
            SELECT r.id, 'Step ' || s, 'echo', to_jsonb(s), 'succeeded', to_jsonb(s), 1, 0, 0,
              '0', r.created_at, r.created_at
            FROM pikku_workflows_workflowrun r, generate_series(1, {STEPS_PER_RUN}) AS s""")
        # The run whose detail, history and page are measured: 1,000 steps, 1-3 attempts.
        cursor.execute(f"""INSERT INTO pikku_workflows_workflowrun (id, workflow, status, input,
            output, state, inline, graph_hash, deterministic, planned_steps, wire, owner_id,
            lease_owner, created_at, updated_at, finished_at)
            VALUES (md5('big')::uuid, 'bench_big', 'completed', '{{}}', '1', '{{}}', false,
              'abcdef123456', false, '[]', '{{"shape": "{SHAPE}"}}', {first_user} + 1, '', now(),
              now(), now())""")
        cursor.execute(f"""INSERT INTO pikku_workflows_workflowstep (run_id, step_name, rpc_name,
            data, status, result, attempt_count, attempt_base, retries, retry_delay,
            created_at, updated_at)
            SELECT md5('big')::uuid, 'Step ' || s, 'echo', to_jsonb(s), 'succeeded',
              to_jsonb(s), 1 + s % 3, 0, 2, '0', now(), now()
            FROM generate_series(1, {BIG_RUN_STEPS}) AS s""")
        cursor.execute("""INSERT INTO pikku_workflows_stepattempt (step_id, attempt, status,
            error, created_at, running_at, succeeded_at, failed_at)
            SELECT st.id, a, CASE WHEN a = st.attempt_count THEN 'succeeded' ELSE 'failed' END,
              CASE WHEN a < st.attempt_count THEN '{"message": "transient"}'::jsonb END,
              now(), now(), CASE WHEN a = st.attempt_count THEN now() END,
              CASE WHEN a < st.attempt_count THEN now() END
            FROM pikku_workflows_workflowstep st, generate_series(1, 3) AS a
            WHERE st.run_id = md5('big')::uuid AND a <= st.attempt_count""")
        # A table that has held its runs a while has been vacuumed (its visibility map
        # set, so index-only scans skip the heap) and analysed: autovacuum would still be
        # at it right after a bulk load, and the 1M timings would measure that.
        cursor.execute("VACUUM (ANALYZE) pikku_workflows_workflowrun, "
                       "pikku_workflows_workflowstep, pikku_workflows_stepattempt")
        cursor.execute("ANALYZE")


def measure(requests: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """p50/p95 (ms) and queries of each ``name: (who, url)`` request."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    users = get_user_model().objects
    staff = users.get(username="bench_0")
    if not staff.is_superuser:
        users.filter(pk=staff.pk).update(is_superuser=True, is_staff=True)
        staff.refresh_from_db()
    clients = {"staff": Client(), "owner": Client()}
    clients["staff"].force_login(staff)
    clients["owner"].force_login(users.get(username="bench_1"))
    results = {}
    for name, (who, url) in requests.items():
        client = clients[who]
        for _ in range(3):
            response = client.get(url)
            assert response.status_code == 200, (name, response.status_code,
                                                  response.content[:300])
        timings = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        results[name] = {"p50": statistics.median(timings), "p95": percentile(timings, 0.95),
                         "queries": len(captured)}
    return results


def big_run_id() -> str:
    import hashlib
    import uuid

    return str(uuid.UUID(hashlib.md5(b"big").hexdigest()))


#: Requests whose answer grows with the table: 1 run in 1,000 matches, so one run at 1k and
#: a full page at 1M. Their 1M / 1k ratio compares different work: reported, and held
#: to the absolute limit only (issue 24: p95 <= 300 ms at a million runs).
GROWING = frozenset({"list input__contains, nested, 1 in 1,000",
                     "search by content, nested, 1 in 1,000"})


def report(section: Any, results: dict[str, dict[str, Any]], limits: dict[str, float],
           ratio_limit: float) -> None:
    """Rows and targets of a scale section: each request at both sizes, side by side."""
    from benchmarks.harness import Target, ratio

    small, large = results["1k"], results["1m"]
    for name in small:
        a, b = small[name], large[name]
        section.rows.append([name, a["p50"], a["p95"], b["p50"], b["p95"],
                             ratio(b["p95"], a["p95"]), f"{a['queries']} / {b['queries']}"])
        if name not in GROWING:
            section.targets.append(Target(f"{name}: p95 at 1M / p95 at 1k",
                                          ratio(b["p95"], a["p95"]), ratio_limit, "x"))
        section.targets.append(Target(f"{name}: p95 at 1M", b["p95"], limits[name], "ms"))
        if name in GROWING:
            section.notes.append(f"{name}: one matching run at 1k, a page of them at 1M; "
                                 "held to its p95 at 1M only.")
        if a["queries"] != b["queries"]:
            section.problems.append(f"{name}: {a['queries']} queries at 1k, "
                                    f"{b['queries']} at 1M")


COLUMNS = ["request", "1k p50 ms", "1k p95 ms", "1M p50 ms", "1M p95 ms", "p95 1M / 1k",
           "queries 1k / 1M"]


def run_scale_bench(doc: str, script: str, bench: str, title: str, workload: str,
                    requests: Any, limits: dict[str, float], notes: tuple[str, ...] = ()
                    ) -> None:
    """The main of B8 and B9: each size in its own process, then the section."""
    from benchmarks.harness import Section, bench_args, finish, run_part

    def part(name: str, db: str, size: str) -> dict[str, Any]:
        setup(name)
        return measure(requests())

    args = bench_args(doc, tuple(SIZES), part)
    if args is None:
        return
    section = Section(bench=bench, title=title, size=args.size, workload=workload,
                      columns=COLUMNS, notes=list(notes))
    results = {size: run_part(script, size, size=args.size, timeout=3600) for size in SIZES}
    report(section, results, limits, 1.5)
    finish(section, args)
