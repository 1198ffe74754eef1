"""Step keys: the physical keys the engine gives gates and compensations, and the public
names, labels the API and console show for them (one place for every surface)."""

from __future__ import annotations

import re
from typing import Any

from .status import StepKind, SuspensionCode

#: The prefix of the keys the engine gives gates (``__workflow_approval:<reason>``...).
ENGINE_KEY_PREFIX = "__workflow_"
#: The gates' physical key prefixes and their kinds. Their public names drop
#: ``__workflow_`` (``approval:<reason>``): user step names may not start with
#: ``approval:`` or ``suspend:`` (``dsl.context.check_step_name``), so the public name is
#: still unique within the run and :func:`step_key` turns it back into the key.
APPROVAL_PREFIX = ENGINE_KEY_PREFIX + "approval:"
SUSPEND_PREFIX = ENGINE_KEY_PREFIX + "suspend:"
GATE_KINDS: dict[str, StepKind] = {APPROVAL_PREFIX: StepKind.APPROVAL,
                                   SUSPEND_PREFIX: StepKind.SUSPEND}
#: The key prefix of a patch marker: the step ``wf.patched(patch_id)`` records when a run
#: first reaches the patch (``__workflow_patch:<patch_id>``; public name ``patch:<id>``).
PATCH_PREFIX = ENGINE_KEY_PREFIX + "patch:"
#: What the public names of gates and patch markers start with (reserved for them).
PUBLIC_GATE_PREFIXES = tuple(prefix[len(ENGINE_KEY_PREFIX):]
                             for prefix in (*GATE_KINDS, PATCH_PREFIX))
#: The suffix of a compensation step's key: ``<key>:onError`` (DSL runs).
COMPENSATION_SUFFIX = ":onError"
_REPEAT = re.compile(r"#\d+$")
_ITEM = re.compile(r"\[\d+\]$")


def public_step_name(key: str) -> str:
    """A step key as API users see it: a gate's ``__workflow_approval:Sign-off`` is
    ``approval:Sign-off`` (still unique within the run), other keys are unchanged.

    Args:
        key: The physical step key (``WorkflowStep.step_name``).

    Returns:
        The step's ``name`` in every answer of the API and of ``get_run_status``.
    """
    return key[len(ENGINE_KEY_PREFIX):] if key.startswith(ENGINE_KEY_PREFIX) else key


def step_key(name: str) -> str:
    """The physical step key of a public step name: the inverse of
    :func:`public_step_name` (``approval:Sign-off#1`` is ``__workflow_approval:Sign-off#1``).

    Args:
        name: A step ``name`` as the API shows it.

    Returns:
        The ``WorkflowStep.step_name`` it stands for.
    """
    return ENGINE_KEY_PREFIX + name if name.startswith(PUBLIC_GATE_PREFIXES) else name


def step_label(key: str, *, graph: bool = False) -> str:
    """What the user wrote in their code for the step ``key``: ``Charge`` for
    ``Charge#1`` (and for its compensation ``Charge#1:onError``), the reason for a gate,
    the node for a graph instance (``node[2]``, ``node#1``).

    Args:
        key: The physical step key.
        graph: Whether the run is a graph run (its keys are node instances).

    Returns:
        The step's ``label``.
    """
    if graph:
        return _REPEAT.sub("", _ITEM.sub("", key))
    if key.endswith(COMPENSATION_SUFFIX):
        key = key[:-len(COMPENSATION_SUFFIX)]
    for prefix in (*GATE_KINDS, PATCH_PREFIX):
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    return _REPEAT.sub("", key)


def asked_in_order(key: str) -> bool:
    """Whether a replay of a DSL run must ask for the recorded step ``key`` again, in its
    place: every step but compensations (asked by a failure, not by the body) and patch
    markers (the ``wf.patched`` call may be deleted once no run lacks its marker).

    Args:
        key: The physical step key.

    Returns:
        True for the steps whose order a replay checks.
    """
    return not key.endswith(COMPENSATION_SUFFIX) and not key.startswith(PATCH_PREFIX)


def approval_wait(error: Any) -> str | None:
    """The approval gate a suspended run's ``error`` says it waits at, or None.

    ``error.code`` is ``WAITING_FOR_APPROVAL`` since that code exists; runs suspended
    at a gate by an older release (or by an older process during a rolling deploy) say
    ``WORKFLOW_SUSPENDED`` with the gate's key in ``error.step``: both are recognised.

    Args:
        error: A run's ``error`` (a dict, or None).

    Returns:
        The gate's step key (``__workflow_approval:<reason>``), or None.
    """
    if not isinstance(error, dict):
        return None
    step = error.get("step")
    if not isinstance(step, str) or not step.startswith(APPROVAL_PREFIX):
        return None
    code = error.get("code")
    if code in (SuspensionCode.WAITING_FOR_APPROVAL, SuspensionCode.WORKFLOW_SUSPENDED):
        return step
    return None


__all__ = [
    "APPROVAL_PREFIX", "COMPENSATION_SUFFIX", "ENGINE_KEY_PREFIX", "GATE_KINDS",
    "PATCH_PREFIX", "PUBLIC_GATE_PREFIXES", "SUSPEND_PREFIX", "approval_wait",
    "asked_in_order", "public_step_name", "step_key", "step_label",
]
