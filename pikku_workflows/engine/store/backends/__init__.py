"""The store's backends: one per database vendor, chosen once per vendor and cached.

This is the one place that looks at ``connection.vendor``.
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections

from .base import IN_FLIGHT_STATUSES, Lease, Outcome, StoreBackend, in_flight
from .postgresql import PostgresBackend
from .sqlite import SqliteBackend

BACKENDS: dict[str, type[StoreBackend]] = {
    "postgresql": PostgresBackend,
    "sqlite": SqliteBackend,
}

_chosen: dict[str, StoreBackend] = {}


def backend(alias: str = DEFAULT_DB_ALIAS) -> StoreBackend:
    """The backend for the database ``alias`` (the generic ORM one for a vendor
    without its own)."""
    vendor = connections[alias].vendor
    chosen = _chosen.get(vendor)
    if chosen is None:
        chosen = _chosen[vendor] = BACKENDS.get(vendor, StoreBackend)()
    return chosen


__all__ = ["IN_FLIGHT_STATUSES", "Lease", "Outcome", "StoreBackend", "backend", "in_flight"]
