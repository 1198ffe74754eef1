"""Shared fixtures: a clean step-call ledger and audit log per test."""

from __future__ import annotations

import pytest

from tests.testapp.workflows import AUDIT_LOG, CALLS


@pytest.fixture(autouse=True)
def _clean_ledgers():
    CALLS.clear()
    AUDIT_LOG.clear()
    yield
    CALLS.clear()
    AUDIT_LOG.clear()
