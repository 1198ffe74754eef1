"""The API tests' clients (owner, other, staff, anonymous) are in tests/conftest.py."""

from __future__ import annotations

from tests.conftest import API, client_for

__all__ = ["API", "client_for"]
