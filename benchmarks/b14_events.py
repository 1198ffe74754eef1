"""B14: events: runs waiting for events on two workers, one event sent per key at a steady
rate: wake lateness and runs never woken; the queries of ``send_event`` with ten times
more runs waiting on other keys; DBOS ``send``/``recv`` as the peer when it is there."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from benchmarks.harness import (
    Section,
    Target,
    bench_args,
    count_queries,
    finish,
    percentile,
    query_kinds,
    ratio,
    run_part,
    setup_script_django,
    wait_for_runs,
    workers,
)
from tests.processes import wait_until

SIZES: dict[str, dict[str, Any]] = {
    # runs: waiting runs woken by one event each, sent at `rate` per second;
    # waiters: runs waiting on other keys in the cost part (then ten times as many);
    # dbos: DBOS workflows waiting in recv (each holds one of its threads).
    "tiny": {"runs": 50, "rate": 50.0, "waiters": 50, "sends": 10, "dbos": 50},
    "full": {"runs": 1000, "rate": 200.0, "waiters": 1000, "sends": 20, "dbos": 200},
}
SCRIPT = "b14_events.py"
EVENT = "bench.paid"
#: How long a run waits at most: far past the benchmark, so a timeout is a problem.
WAIT_TIMEOUT = "1h"


def clear_events() -> None:
    """No event, message or run of an earlier benchmark left (waits go with their runs)."""
    from pikku_workflows.models import WorkflowEvent, WorkflowMessage, WorkflowRun

    WorkflowMessage.objects.all().delete()
    WorkflowRun.objects.all().delete()
    WorkflowEvent.objects.all().delete()


def waiting(run_ids: list[Any]) -> int:
    """How many of ``run_ids`` are suspended waiting for their event."""
    from pikku_workflows.models import WorkflowRun

    return WorkflowRun.objects.filter(pk__in=run_ids, status="suspended",
                                      error__code="WAITING_FOR_EVENT").count()


def wake(size: str) -> dict[str, Any]:
    """``runs`` runs waiting for ``bench.paid`` on keys of their own, on two
    ``pikku_worker`` processes; then one event per key at ``rate`` per second. Lateness:
    the first attempt of the step after the wait created, minus the event's
    ``created_at`` (stored in the sending transaction, before its commit)."""
    from django.db.models import Min

    import pikku_workflows as pw
    from pikku_workflows.models import StepAttempt, WorkflowEvent, WorkflowRun

    sizes = SIZES[size]
    runs, rate = sizes["runs"], sizes["rate"]
    clear_events()
    problems: list[str] = []
    with workers(2) as pool:
        run_ids = [pw.start_workflow("bench_awaits_event",
                                     {"key": f"k-{i}", "timeout": WAIT_TIMEOUT},
                                     inline=False).pk for i in range(runs)]
        wait_until(lambda: waiting(run_ids) == runs, timeout=120 + runs / 10, interval=0.25,
                   what=f"{runs} runs waiting for their event")
        gap = 1.0 / rate
        started = time.perf_counter()
        woken = 0
        for i in range(runs):
            pause = started + i * gap - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            woken += pw.send_event(EVENT, {"i": i}, key=f"k-{i}").woken
        send_seconds = time.perf_counter() - started
        try:
            wait_for_runs(run_ids, timeout=60 + runs / 20, interval=0.25)
        except (AssertionError, TimeoutError) as exc:
            problems.append(f"not every run finished: {exc}")
        if woken != runs:
            problems.append(f"send_event reported {woken} runs woken, not {runs}")
        if problems:
            problems.append(pool.output()[-500:])
    keys = dict(WorkflowRun.objects.filter(pk__in=run_ids).values_list("pk", "input__key"))
    completed = set(WorkflowRun.objects.filter(pk__in=run_ids, status="completed")
                    .values_list("pk", flat=True))
    sent = dict(WorkflowEvent.objects.filter(event=EVENT).values_list("key", "created_at"))
    after = dict(StepAttempt.objects.filter(step__run_id__in=run_ids, step__step_name="After")
                 .values("step__run_id").annotate(at=Min("created_at"))
                 .values_list("step__run_id", "at"))
    lateness = [(after[run_id] - sent[keys[run_id]]).total_seconds()
                for run_id in run_ids if run_id in after and keys.get(run_id) in sent]
    not_woken = len(run_ids) - len(completed)
    if not_woken:
        problems.append(f"{not_woken} of {runs} runs were not woken (not completed)")
    return {"runs": runs, "rate": rate, "send_seconds": send_seconds, "measured": len(lateness),
            "p50": percentile(lateness, 0.5), "p99": percentile(lateness, 0.99),
            "max": max(lateness, default=0.0), "not_woken": not_woken,
            "problems": problems[:10]}


def cost(size: str) -> dict[str, Any]:
    """Queries and time of ``send_event`` with ``waiters`` runs waiting on other keys,
    then with ten times as many: to a key nobody waits on, and to a key one (inline) run
    waits on, which the send continues in this process."""
    import pikku_workflows as pw

    sizes = SIZES[size]
    sends = sizes["sends"]
    clear_events()
    measured: dict[str, dict[str, Any]] = {}
    made = 0
    for label, total in (("1x", sizes["waiters"]), ("10x", sizes["waiters"] * 10)):
        for i in range(made, total):
            pw.start_workflow("bench_awaits_event",
                              {"key": f"other-{i}", "timeout": WAIT_TIMEOUT}, inline=True)
        made = total
        for j in range(sends):
            pw.start_workflow("bench_awaits_event",
                              {"key": f"one-{label}-{j}", "timeout": WAIT_TIMEOUT},
                              inline=True)
        row: dict[str, Any] = {"waiters": total}
        for kind, key in (("nobody", "nobody-{label}-{j}"), ("one", "one-{label}-{j}")):
            queries, seconds, woken = [], [], 0
            kinds: dict[str, int] = {}
            for j in range(sends):
                event_key = key.format(label=label, j=j)
                at = time.perf_counter()
                result, sql = count_queries(partial(pw.send_event, EVENT, {"j": j},
                                                    key=event_key))
                seconds.append(time.perf_counter() - at)
                queries.append(len(sql))
                woken += result.woken
                kinds = query_kinds(sql)
            row[kind] = {"queries_max": max(queries), "queries_min": min(queries),
                         "ms_p50": percentile(seconds, 0.5) * 1000, "woken": woken,
                         "kinds": kinds}
        measured[label] = row
    problems = []
    for label, row in measured.items():
        if row["nobody"]["woken"] != 0:
            problems.append(f"{label}: a send to a key nobody waits on woke "
                            f"{row['nobody']['woken']} runs")
        if row["one"]["woken"] != sends:
            problems.append(f"{label}: {sends} sends to keys one run waits on woke "
                            f"{row['one']['woken']} runs")
    return {"sends": sends, **measured, "problems": problems}


def dbos(size: str) -> dict[str, Any]:
    """DBOS's ``recv``/``send`` on the same server (``dbos_peer.run_send_recv``)."""
    try:
        from benchmarks import dbos_peer
    except ImportError as exc:
        return {"available": False, "why": f"dbos is not installed ({exc})"}
    sizes = SIZES[size]
    dbos_peer.launch("postgres")
    try:
        result = dbos_peer.run_send_recv(sizes["dbos"], sizes["rate"], timeout=600)
    finally:
        dbos_peer.shutdown()
    late = result["lateness"]
    return {"available": True, "why": "", "runs": sizes["dbos"], "measured": len(late),
            "p50": percentile(late, 0.5), "p99": percentile(late, 0.99),
            "problems": result["problems"]}


def part(name: str, db: str, size: str) -> dict[str, Any]:
    if name == "dbos":
        return dbos(size)  # its own database: no Django needed
    setup_script_django(db)
    if name == "wake":
        return wake(size)
    return cost(size)


def main() -> None:
    args = bench_args(__doc__ or "", ("wake", "cost", "dbos"), part)
    if args is None:
        return
    sizes = SIZES[args.size]
    section = Section(
        bench="B14", title="events: wake lateness and the cost of send_event",
        size=args.size,
        workload=(f"{sizes['runs']} runs (`wf.wait_for_event` on a key of their own, then "
                  "one inline step) waiting on 2 `pikku_worker` processes; one "
                  f"`send_event` per key at {sizes['rate']:g} per second. Lateness = the "
                  "first attempt of the step after the wait created, minus the event's "
                  "`created_at`. Cost: `send_event` in this process with "
                  f"{sizes['waiters']} and then {sizes['waiters'] * 10} runs waiting on "
                  f"other keys, {sizes['sends']} sends of each kind; PostgreSQL, Redis"),
        columns=["measure", "runs", "queries", "ms p50", "p50 s", "p99 s"],
    )
    woke = run_part(SCRIPT, "wake", size=args.size, timeout=1800)
    section.problems += woke["problems"]
    section.rows.append(["wake: send_event -> the step after the wait", woke["measured"], "",
                         "", woke["p50"], woke["p99"]])
    spent = run_part(SCRIPT, "cost", size=args.size, timeout=1800)
    section.problems += spent["problems"]
    for label in ("1x", "10x"):
        row = spent[label]
        for kind, what in (("nobody", "a key nobody waits on"),
                           ("one", "a key one inline run waits on (woken here)")):
            measured = row[kind]
            queries = (str(measured["queries_max"]) if measured["queries_max"]
                       == measured["queries_min"]
                       else f"{measured['queries_min']}-{measured['queries_max']}")
            section.rows.append([f"send_event to {what}, {row['waiters']} waiting on other "
                                 "keys", row["waiters"], queries, measured["ms_p50"], "", ""])
    query_ratio = max(ratio(spent["10x"][kind]["queries_max"],
                            spent["1x"][kind]["queries_max"]) for kind in ("nobody", "one"))
    time_ratio = ratio(spent["10x"]["nobody"]["ms_p50"], spent["1x"]["nobody"]["ms_p50"])
    section.targets.append(Target("wake lateness p99 (send_event -> the next step)",
                                  woke["p99"], 1.0, "s"))
    section.targets.append(Target("runs not woken", woke["not_woken"], 0))
    section.targets.append(Target("queries per send_event, 10x more runs waiting on other "
                                  "keys / 1x (constant)", query_ratio, 1.0))
    section.notes.append(
        f"Events sent in {woke['send_seconds']:.1f} s; the slowest wake took "
        f"{woke['max']:.2f} s. Time of a send to a key nobody waits on, 10x / 1x waiting "
        f"runs: {time_ratio:.2f} (a time, noisy on a shared machine; the queries are the "
        "target).")
    section.notes.append("Queries of a send that wakes one inline run, by kind: " + ", ".join(
        f"{k} {v}" for k, v in spent["10x"]["one"]["kinds"].items()) + ".")
    peer = run_part(SCRIPT, "dbos", size=args.size, timeout=1800)
    if peer["available"]:
        section.problems += [f"DBOS: {p}" for p in peer["problems"]]
        section.rows.append([f"peer: DBOS send -> the step after recv ({peer['runs']} "
                             "waiting)", peer["measured"], "", "", peer["p50"], peer["p99"]])
        section.notes.append(
            f"DBOS's p99 / ours: {ratio(peer['p99'], woke['p99']):.2f} (above 1: ours "
            "wakes sooner). DBOS runs its workflows in the sending process's threads (each "
            "waiting `recv` holds one, hence fewer of them), ours on two worker processes "
            "that hold nothing while a run waits; DBOS's lateness is measured from just "
            "before `send`.")
    else:
        section.notes.append(f"No peer measured: {peer['why']}.")
    finish(section, args)


if __name__ == "__main__":
    main()
