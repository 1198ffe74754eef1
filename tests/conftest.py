"""Shared fixtures: a clean step-call ledger per test."""

from __future__ import annotations

import pytest

from tests.testapp.workflows import CALLS


@pytest.fixture(autouse=True)
def _clean_calls():
    CALLS.clear()
    yield
    CALLS.clear()
