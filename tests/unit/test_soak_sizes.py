"""``make soak`` runs the flow-control fault tests at the issue's sizes (1,000 runs over
100 keys; 500 limited steps), CI at smaller ones."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.faults import test_concurrency_kills, test_step_limits

ROOT = Path(__file__).resolve().parents[2]


def soak_commands() -> list[str]:
    """The commands of the Makefile's ``soak`` target, continuation lines joined."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^soak:.*?\n((?:\t.*\n)+)", text, flags=re.M)
    assert recipe is not None, "the Makefile has no soak target"
    return [line.strip() for line in
            recipe.group(1).replace("\\\n", " ").splitlines() if line.strip()]


def test_make_soak_runs_the_concurrency_fault_test_with_its_soak_size():
    commands = [c for c in soak_commands() if "tests/faults/test_concurrency_kills.py" in c]
    assert len(commands) == 1 and "PIKKU_FLOW_SOAK=1" in commands[0]
    commands = [c for c in soak_commands() if "tests/faults/test_step_limits.py" in c]
    assert len(commands) == 1 and "PIKKU_LIMITS_STEPS=500" in commands[0]


@pytest.mark.parametrize(("value", "sizes"), [("1", (1000, 100)), (None, (200, 20))])
def test_the_concurrency_fault_test_is_1000_runs_over_100_keys_under_soak(
        monkeypatch, value, sizes):
    if value is None:
        monkeypatch.delenv("PIKKU_FLOW_SOAK", raising=False)
    else:
        monkeypatch.setenv("PIKKU_FLOW_SOAK", value)
    try:
        module = importlib.reload(test_concurrency_kills)
        assert sizes == (module.RUNS, module.KEYS)
    finally:
        monkeypatch.undo()
        importlib.reload(test_concurrency_kills)


def test_the_step_limits_fault_test_takes_its_size_from_the_environment(monkeypatch):
    monkeypatch.setenv("PIKKU_LIMITS_STEPS", "500")
    try:
        assert importlib.reload(test_step_limits).STEPS == 500
    finally:
        monkeypatch.undo()
        importlib.reload(test_step_limits)
