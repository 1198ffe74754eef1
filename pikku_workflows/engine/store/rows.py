"""Unsaved step and attempt rows for the hot path, built without ``Model.__init__``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from django.db import models
from django.db.models.base import ModelState

from ...models import StepAttempt, WorkflowStep
from ...status import StepStatus

M = TypeVar("M", bound=models.Model)

_templates: dict[type[models.Model], dict[str, Any]] = {}


def _template(model: type[models.Model]) -> dict[str, Any]:
    """Every concrete field's default, by attribute name (computed once per model); None
    for a default computed per row (a callable's), which the caller gives."""
    template = _templates.get(model)
    if template is None:
        template = {f.attname: None if f.has_default() and callable(f.default)
                    else f.get_default() for f in model._meta.concrete_fields}
        # Shared by every row: only immutable defaults may be copied this way.
        assert all(v is None or isinstance(v, str | int) for v in template.values()), model
        _templates[model] = template
    return template


def unsaved(model: type[M], **fields: Any) -> M:
    """An unsaved instance of ``model`` with ``fields`` (attribute names, ``run_id`` not
    ``run``) and every other field at its default.

    The same instance as ``model(**fields)``, at a fraction of the cost (a step costs two
    of them): ``Model.__init__`` resolves each field's default and descriptor one by one.
    It sends no ``pre_init``/``post_init``, which these models do not use.
    """
    row = model.__new__(model)
    row._state = ModelState()
    row.__dict__.update(_template(model))
    row.__dict__.update(fields)
    return row


def new_attempt(step: WorkflowStep, number: int, now: datetime) -> StepAttempt:
    """An unsaved attempt of ``step``, created and running at ``now`` (``step`` may be
    unsaved too: ``save`` then takes the step's id from the cached step, as with
    ``StepAttempt(step=step)``)."""
    attempt = unsaved(StepAttempt, step_id=step.pk, attempt=number, status=StepStatus.RUNNING,
                      created_at=now, running_at=now)
    attempt._state.fields_cache["step"] = step
    return attempt


def waiting_for(step: WorkflowStep) -> str:
    """The limit the step waits for ("": none), read from the row as loaded: never a
    query, and "" for a row of an older schema (before 0017_step_limits) or one not saved
    yet."""
    return str(step.__dict__.get("waiting_for_limit") or "")
