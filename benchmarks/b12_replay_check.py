"""B12: the replay check (``pikku_replay_check``) over 10,000 recorded runs of 10 steps."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    finish,
    run_part,
    setup_script_django,
)

SIZES: dict[str, dict[str, int]] = {"tiny": {"runs": 200}, "full": {"runs": 10_000}}
SCRIPT = "b12_replay_check.py"
STEPS = 10
#: One run in this many recorded a step the code no longer asks for (a renamed step).
DIVERGING_EVERY = 100
#: The full size's limit: every run checked in under a minute.
LIMIT_S = 60.0


def seed(runs: int) -> int:
    """Record ``runs`` completed runs of ``bench_steps`` (10 steps each) in bulk; every
    ``DIVERGING_EVERY``-th recorded its last step under an old name.

    Returns:
        How many runs diverge from the current code.
    """
    from django.db import connection

    from pikku_workflows.models import WorkflowRun, WorkflowStep

    last = STEPS - 1
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"""INSERT INTO pikku_workflows_workflowrun (id, workflow, status,
                input, output, state, inline, graph_hash, deterministic, planned_steps, wire,
                lease_owner, created_at, updated_at, finished_at)
                SELECT md5('b12-' || i)::uuid, 'bench_steps', 'completed',
                  '{{"steps": {STEPS}}}'::jsonb, '{STEPS}'::jsonb, '{{}}'::jsonb, true,
                  'abcdef123456', true, '[]'::jsonb, '{{}}'::jsonb, '',
                  now() - make_interval(secs => i), now(), now()
                FROM generate_series(1, {runs}) AS i""")
            cursor.execute(f"""INSERT INTO pikku_workflows_workflowstep (run_id, step_name,
                rpc_name, data, status, result, attempt_count, attempt_base, retries,
                retry_delay, created_at, updated_at)
                SELECT md5('b12-' || i)::uuid,
                  CASE WHEN s = {last} AND i % {DIVERGING_EVERY} = 0 THEN 'Old step '
                       ELSE 'Step ' END || s,
                  'bench_noop', to_jsonb(s), 'succeeded', to_jsonb(s), 1, 0, 0, '0', now(),
                  now()
                FROM generate_series(1, {runs}) AS i, generate_series(0, {last}) AS s
                ORDER BY i, s""")
            if not connection.in_atomic_block:  # (a test's transaction cannot vacuum)
                cursor.execute("VACUUM (ANALYZE) pikku_workflows_workflowrun, "
                               "pikku_workflows_workflowstep")
    else:
        made = WorkflowRun.objects.bulk_create(
            [WorkflowRun(workflow="bench_steps", status="completed", input={"steps": STEPS},
                         output=STEPS, inline=True) for _ in range(runs)], batch_size=1000)
        WorkflowStep.objects.bulk_create(
            [WorkflowStep(run_id=run.pk, status="succeeded", rpc_name="bench_noop", data=s,
                          result=s, attempt_count=1,
                          step_name=("Old step " if s == last and i % DIVERGING_EVERY == 0
                                     else "Step ") + str(s))
             for i, run in enumerate(made, start=1) for s in range(STEPS)], batch_size=2000)
    return runs // DIVERGING_EVERY


def part(name: str, db: str, size: str) -> dict[str, Any]:
    setup_script_django(db)
    import io

    from django.core.management import CommandError, call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    runs = SIZES[size]["runs"]
    started = time.perf_counter()
    expected = seed(runs)
    seeded_s = time.perf_counter() - started
    out = io.StringIO()
    started = time.perf_counter()
    code = 0
    with CaptureQueriesContext(connection) as queries:
        try:
            call_command("pikku_replay_check", stdout=out)
        except CommandError as exc:
            code = exc.returncode
    seconds = time.perf_counter() - started
    lines = out.getvalue().splitlines()
    diverging = sum(1 for line in lines if line.startswith("DIVERGES "))
    writes = [q["sql"] for q in queries.captured_queries
              if q["sql"].lstrip().split(" ", 1)[0].upper() in ("INSERT", "UPDATE", "DELETE")]
    problems = []
    if diverging != expected or code != (1 if expected else 0):
        problems.append(f"{diverging} runs reported diverging (exit {code}), expected "
                        f"{expected}: {lines[-1] if lines else ''}")
    if writes:
        problems.append(f"the check wrote {len(writes)} statements: {writes[0][:200]}")
    return {"runs": runs, "seconds": seconds, "seeded_s": seeded_s, "diverging": diverging,
            "queries": len(queries.captured_queries), "problems": problems}


def main() -> None:
    args = bench_args(__doc__ or "", ("ours",), part)
    if args is None:
        return
    result = run_part(SCRIPT, "ours", size=args.size)
    section = Section(
        bench="B12", title="replay check over recorded runs", size=args.size,
        workload=(f"{result['runs']:,} completed runs of {STEPS} steps seeded in bulk (one "
                  f"in {DIVERGING_EVERY} with its last step under an old name), then "
                  "`manage.py pikku_replay_check` over all of them; PostgreSQL"),
        columns=["runs", "check s", "runs/s", "diverging", "queries"],
        problems=list(result["problems"]),
    )
    section.rows.append([result["runs"], result["seconds"],
                         result["runs"] / max(result["seconds"], 1e-9), result["diverging"],
                         result["queries"]])
    limit = LIMIT_S * result["runs"] / SIZES["full"]["runs"]
    section.targets.append(Target(f"check of {result['runs']:,} runs", result["seconds"],
                                  limit, "s"))
    section.notes.append(
        "A dry replay calls no step function and writes nothing (the benchmark counts the "
        "INSERT, UPDATE and DELETE statements: a problem if any); steps are read 500 runs "
        "to a query.")
    finish(section, args)


if __name__ == "__main__":
    main()
