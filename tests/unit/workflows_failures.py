"""The workflows of tests/unit/test_step_failures.py."""

from __future__ import annotations

import asyncio

import pikku_workflows as pw
from tests.testapp.shared import record


class BadError(Exception):
    """An exception whose ``str()`` itself raises."""

    def __str__(self) -> str:
        raise ValueError("no message for you")


class Unprintable:
    """An exception argument whose ``str()`` raises (``str(exc)`` then raises too)."""

    def __str__(self) -> str:
        raise RuntimeError("cannot print me")

    __repr__ = __str__


def _raise(kind: str) -> None:
    if kind == "bad-str":
        raise BadError()
    if kind == "bad-args":
        raise RuntimeError(Unprintable())
    if kind == "system-exit":
        raise SystemExit(3)
    if kind == "generator-exit":
        raise GeneratorExit()
    if kind == "keyboard-interrupt":
        raise KeyboardInterrupt()
    raise AssertionError(kind)


@pw.function
def fails_strangely(data, ctx):
    """Raises ``data["kind"]`` on the first ``data["times"]`` attempts."""
    record("fails_strangely", data, ctx)
    if ctx.attempt <= data["times"]:
        _raise(data["kind"])
    return {"attempt": ctx.attempt}


@pw.function(queued=True)
def queued_fails_strangely(data, ctx):
    record("queued_fails_strangely", data, ctx)
    if ctx.attempt <= data["times"]:
        _raise(data["kind"])
    return {"attempt": ctx.attempt}


@pw.function
def undo_strange(data):
    record("undo_strange", data)
    return None


@pw.workflow
def strange_failure(wf, data):
    """One step that fails strangely, retried once, compensated when exhausted."""
    fn = "queued_fails_strangely" if data.get("queued") else "fails_strangely"
    return wf.do("Strange", fn, {"kind": data["kind"], "times": data["times"]},
                 retries=1, retry_delay=0, on_error="undo_strange")


@pw.function
async def async_double(data, ctx):
    await asyncio.sleep(0)
    record("async_double", data, ctx)
    return {"value": data["value"] * 2, "attempt": ctx.attempt}


@pw.function(queued=True)
async def queued_async_double(data):
    await asyncio.sleep(0)
    return {"value": data["value"] * 2}


@pw.function
async def async_flaky(data, ctx):
    await asyncio.sleep(0)
    if ctx.attempt == 1:
        raise RuntimeError("first async attempt fails")
    return ctx.attempt


@pw.workflow
def uses_async_steps(wf, data):
    async def closure():
        await asyncio.sleep(0)
        return f"closure {data['value']}"

    return {
        "fn": wf.do("Async fn", async_double, {"value": data["value"]}),
        "closure": wf.do("Async closure", closure),
        "flaky": wf.do("Async flaky", "async_flaky", {}, retries=1, retry_delay=0),
    }


@pw.workflow
def uses_queued_async_step(wf, data):
    return wf.do("Queued async", "queued_async_double", {"value": data["value"]})


pw.graph_workflow("async_graph", nodes={"double": "async_double"},
                  config={"double": {"input": {"value": pw.ref("trigger", "value")}}},
                  output="double")
