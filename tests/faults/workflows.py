"""The workflows of the fault suite: queued, atomic, retried, sleeping and child steps."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import pikku_workflows as pw

from .models import FaultLedger


def _digest(key: str, salt: str) -> int:
    return int(hashlib.sha256(f"{key}:{salt}".encode()).hexdigest(), 16)


def _write_ledger(data: dict[str, Any], ctx: Any) -> None:
    # A second commit for the same invocation breaks the unique constraint: a doubled
    # effect fails loudly instead of hiding in a count.
    FaultLedger.objects.create(invocation_id=ctx.invocation_id, run_key=data["key"],
                               step=ctx.step_name)


def _work(data: dict[str, Any], salt: str) -> None:
    # 10-60 ms of "work", so that a kill often lands inside a step.
    time.sleep(0.01 + (_digest(data["key"], salt) % 50) / 1000)


@pw.function(queued=True, atomic=True, retries=3, retry_delay=0)
def fault_reserve(data, ctx):
    _work(data, "reserve")
    _write_ledger(data, ctx)
    return {"reserved": data["key"]}


@pw.function(queued=True, atomic=True, retries=3, retry_delay="100ms")
def fault_charge(data, ctx):
    """Fails its first attempt for about a third of the runs (by the run's key)."""
    _work(data, "charge")
    if ctx.attempt == 1 and _digest(data["key"], "flaky") % 3 == 0:
        raise ConnectionError("payment gateway timed out (injected)")
    _write_ledger(data, ctx)
    return {"charged": data["amount"]}


@pw.function(queued=True, atomic=True, retries=3, retry_delay=0)
def fault_bill(data, ctx):
    _work(data, "bill")
    _write_ledger(data, ctx)
    return {"invoice": f"INV-{data['key']}"}


@pw.function(queued=True, atomic=True, retries=3, retry_delay=0)
def fault_ship(data, ctx):
    _work(data, "ship")
    _write_ledger(data, ctx)
    return {"shipped": True}


@pw.function
def fault_total(data):
    return data["amount"] * 2


# The atomic steps of one fault_order run, its child's included: one ledger row each.
LEDGER_STEPS = ("Reserve", "Charge", "Bill", "Ship")


@pw.workflow
def fault_invoice(wf, data):
    return wf.do("Bill", "fault_bill", data)


@pw.workflow
def fault_order(wf, data):
    """Six steps: queued atomic, retried, a sleep, a child run, queued, inline."""
    wf.do("Reserve", "fault_reserve", data)
    charged = wf.do("Charge", "fault_charge", data)
    wf.sleep("Cool down", data.get("nap", "200ms"))
    invoice = wf.do("Invoice", "fault_invoice", {"key": data["key"]})
    wf.do("Ship", "fault_ship", data)
    total = wf.do("Total", "fault_total", {"amount": charged["charged"]})
    return {"key": data["key"], "invoice": invoice["invoice"], "total": total}


def expected_output(key: str, amount: int) -> dict[str, Any]:
    """What ``fault_order`` returns for ``{"key": key, "amount": amount}``."""
    return {"key": key, "invoice": f"INV-{key}", "total": amount * 2}


# --- random shapes (the property test): one interpreter workflow --------------------------


def _flaky_echo(data: dict[str, Any], ctx: Any) -> Any:
    if ctx.attempt <= data["fails"]:
        raise ConnectionError(f"transient failure {ctx.attempt} (injected)")
    return data["v"]


# The same function twice: queued (a step job on RQ) and in-pass (an inline-only project).
fault_flaky_echo = pw.function(name="fault_flaky_echo", queued=True)(_flaky_echo)
fault_flaky_echo_here = pw.function(name="fault_flaky_echo_here")(_flaky_echo)


@pw.function
def fault_echo(data):
    return data


@pw.workflow
def fault_shape(wf, data):
    """Runs ``data["ops"]``: do / parallel / sleep / suspend / branch, in order; the
    flaky steps call ``data["fn"]``."""
    seen, flaky = [], data["fn"]
    for op in data["ops"]:
        kind, name = op[0], op[1]
        if kind == "do":
            seen.append(wf.do(name, flaky, {"v": name, "fails": op[2]},
                              retries=2, retry_delay=0))
        elif kind == "parallel":
            seen.extend(wf.parallel([(f"{name} {i}", flaky,
                                      {"v": i, "fails": fails})
                                     for i, fails in enumerate(op[2])], retries=2,
                                    retry_delay=0))
        elif kind == "sleep":
            wf.sleep(name, "10ms")
        elif kind == "suspend":
            seen.append(wf.suspend(name))
        elif kind == "branch":
            picked = wf.do(name, "fault_echo", op[2])
            seen.append(wf.do(f"{name} {'odd' if picked % 2 else 'even'}", "fault_echo", picked))
    return seen


# --- parents and children (a run must never end while a child lives) ----------------------


@pw.function(queued=True, retries=0)
def fault_breaks(data):
    _work(data, "breaks")
    raise RuntimeError(f"broken on purpose: {data['key']}")


@pw.workflow
def fault_waiting_child(wf, data):
    """A child that sleeps then waits for a resume that never comes."""
    wf.do("Echo", "fault_echo", data)
    wf.sleep("Nap", "50ms")
    return wf.suspend("Hold")


@pw.workflow
def fault_family(wf, data):
    """A child run that stays live beside a queued step that fails: the parent ends
    (failed, or completed when ``catch``) while its child waits."""
    try:
        return wf.parallel([("Child", "fault_waiting_child", {"key": data["key"]}),
                            ("Broken", "fault_breaks", {"key": data["key"]})])
    except pw.WorkflowStepFailedError:
        if data.get("catch"):
            return "caught"
        raise


# --- flow control: one run per key at a time (test_concurrency_kills.py) ------------------


def _ledger_line(data: dict[str, Any], mark: str) -> None:
    # One short line per write, appended (O_APPEND): lines of concurrent writers never mix.
    line = f"{mark} {data['key']} {data['n']} {time.time():.6f} {os.getpid()}\n"
    with open(data["ledger"], "a", encoding="utf-8") as ledger:
        ledger.write(line)


@pw.function(retries=5, retry_delay=0)
def fault_hold_slot(data):
    """Writes its start and end times into the ledger file, 100-200 ms apart (so that
    kills land inside steps)."""
    _ledger_line(data, "S")
    time.sleep(0.1 + (_digest(f"{data['key']}-{data['n']}", "hold") % 100) / 1000)
    _ledger_line(data, "E")
    return data["n"]


@pw.workflow(concurrency=pw.Concurrency(max=1, key="key"))
def fault_keyed(wf, data):
    """One run per key at a time: its one step is the whole of its life."""
    return wf.do("Hold", fault_hold_slot, data)
