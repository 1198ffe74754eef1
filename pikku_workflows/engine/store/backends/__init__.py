"""The store's backends: one per database vendor, chosen once per vendor and cached.

This is the one place that looks at ``connection.vendor``.
"""

from __future__ import annotations

from importlib import import_module

from django.db import DEFAULT_DB_ALIAS, connections

from .base import (
    IN_FLIGHT_STATUSES,
    Lease,
    LeasedRun,
    NamedClaim,
    Outcome,
    SlotTake,
    StoreBackend,
    attempt_succeeded_fields,
    in_flight,
    step_succeeded_fields,
)

#: The backend class of each vendor with one of its own, as (module, class): imported on
#: first use, so that a project on SQLite never imports psycopg.
BACKENDS: dict[str, tuple[str, str]] = {
    "postgresql": (".postgresql", "PostgresBackend"),
    "sqlite": (".sqlite", "SqliteBackend"),
}

_chosen: dict[str, StoreBackend] = {}


def backend(alias: str = DEFAULT_DB_ALIAS) -> StoreBackend:
    """The backend for the database ``alias`` (the generic ORM one for a vendor
    without its own)."""
    vendor = connections[alias].vendor
    chosen = _chosen.get(vendor)
    if chosen is None:
        found = BACKENDS.get(vendor)
        cls: type[StoreBackend] = StoreBackend if found is None else getattr(
            import_module(found[0], __name__), found[1])
        chosen = _chosen[vendor] = cls()
    return chosen


__all__ = ["IN_FLIGHT_STATUSES", "Lease", "LeasedRun", "NamedClaim", "Outcome", "SlotTake",
           "StoreBackend",
           "attempt_succeeded_fields", "backend", "in_flight", "step_succeeded_fields"]
