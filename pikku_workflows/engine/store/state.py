"""A run's state dict: keys merged, read and compared-and-set in the database."""

from __future__ import annotations

from django.db import transaction

from ...mirror import changing
from ...models import WorkflowRun
from ...types import RunId, UserJSON
from ..clock import clock
from ..serialization import encode
from .backends import backend
from .unit_of_work import UnitOfWork, flush


def merge_state_key(run_id: RunId, name: str, value: UserJSON,
                    work: UnitOfWork | None = None) -> None:
    """Set one key of the run's state with a single UPDATE that merges it in the database.

    Concurrent writers of different keys therefore never clobber each other.
    """
    text = encode(value, what=f"state value '{name}'")
    flush(work)
    with changing("run", run_id):
        backend().merge_state_key(run_id, name, text, clock().now())


def read_state_key(run_id: RunId, name: str) -> UserJSON:
    """One key of the run's state, read fresh."""
    state = WorkflowRun.objects.filter(pk=run_id).values_list("state", flat=True).first()
    return (state or {}).get(name)


def replace_state_key_if(run_id: RunId, name: str, expected: UserJSON, value: UserJSON,
                         work: UnitOfWork | None = None) -> bool:
    """Compare-and-set one state key under the run row's lock; False if it changed."""
    with transaction.atomic():
        state = (
            WorkflowRun.objects.select_for_update().filter(pk=run_id)
            .values_list("state", flat=True).first()
        )
        if (state or {}).get(name) != expected:
            return False
        merge_state_key(run_id, name, value, work)
        return True
