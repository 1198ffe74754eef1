"""The Python API to start, inspect and steer workflow runs."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction

from .conf import pikku_settings
from .declarations import Concurrency, Debounce
from .dsl.context import STEP_KEY_MAX_LENGTH, check_step_name
from .durations import parse_duration
from .engine import approvals, events, flow, lifecycle, store
from .engine.clock import clock
from .engine.dispatch import get_executor
from .engine.serialization import encoded_input, validated_input
from .engine.summary import RunDetail, run_detail
from .engine.versions import check_startable
from .exceptions import (
    WorkflowApprovalForbiddenError,
    WorkflowApprovalResolvedError,
    WorkflowDefinitionError,
    WorkflowError,
    WorkflowIdempotencyError,
    WorkflowInputError,
    WorkflowNotFoundError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
    WorkflowRunNotFoundError,
    WorkflowRunStateError,
    WorkflowRunSuspendedError,
    WorkflowUnknownGateError,
)
from .models import WorkflowRun, WorkflowStep
from .registry import registry
from .runtime import forks
from .runtime.scheduler import (
    backfill_schedule,
    get_schedule,
    next_fire_times,
    old_ticks,
    pause_schedule,
    prune_ticks,
    resume_schedule,
    schedule_fields,
    sync_schedules,
    trigger_schedule,
    validate_schedule,
)
from .signals import send_step_event, step_succeeded
from .status import RunStatus, StepStatus, SuspensionCode
from .step_keys import SUSPEND_PREFIX, approval_wait, public_step_name, step_label
from .types import RunId


def _owner_id(owner: Any) -> Any:
    if owner is None or getattr(owner, "is_anonymous", False):
        return None
    return getattr(owner, "pk", owner)


#: The longest cancel reason (the REST API's limit too).
CANCEL_REASON_MAX_LENGTH = 1000


def _encoded(value: Any, what: str) -> str:
    """``value`` as JSON text, storable and at most ``MAX_INPUT_BYTES`` long.

    Raises:
        WorkflowInputError: naming ``what`` and the problem.
    """
    return encoded_input(value, what)


def _checked_data(value: Any, what: str) -> Any:
    """``value`` as it will read back from the database (see ``_encoded``)."""
    return json.loads(_encoded(value, what))


def _validated_input(definition: Any, data: Any) -> Any:
    return validated_input(definition, data)


def _check_idempotency_key(key: object) -> None:
    limit = WorkflowRun._meta.get_field("idempotency_key").max_length or 0
    if key is None:
        return
    if not isinstance(key, str) or not key.strip():
        raise WorkflowInputError(
            f"an idempotency_key must be a non-empty string, not {_shown(key)}")
    if len(key) > limit:
        raise WorkflowInputError(
            f"the idempotency_key is {len(key)} characters long; the limit is {limit}")
    if _has_control_characters(key):
        raise WorkflowInputError(
            f"the idempotency_key {_shown(key)} contains control characters or lone "
            "surrogates")


def _shown(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _has_control_characters(text: str, allowed: str = "") -> bool:
    """Whether ``text`` holds control characters (but ``allowed``) or lone surrogates."""
    return any(unicodedata.category(char) in ("Cc", "Cs") and char not in allowed
               for char in text)


def _check_cancel_reason(reason: object) -> None:
    """A cancel reason is None or non-empty text (line breaks and tabs allowed) of at most
    ``CANCEL_REASON_MAX_LENGTH`` characters.

    Raises:
        WorkflowInputError: naming the problem.
    """
    if reason is None:
        return
    if not isinstance(reason, str) or not reason.strip():
        raise WorkflowInputError(
            f"a cancel reason must be a non-empty string or None, not {_shown(reason)}")
    _check_reason_text("cancel", reason, CANCEL_REASON_MAX_LENGTH)


def _check_reason_text(kind: str, reason: str, limit: int) -> None:
    """A reason an operator types: at most ``limit`` characters, no control characters
    but line breaks and tabs.

    Raises:
        WorkflowInputError: naming the problem.
    """
    if len(reason) > limit:
        raise WorkflowInputError(f"the {kind} reason is {len(reason)} characters long; "
                                 f"the limit is {limit}")
    if _has_control_characters(reason, allowed="\t\n\r"):
        raise WorkflowInputError(
            f"the {kind} reason {_shown(reason)} contains control characters or lone "
            "surrogates")


def _check_gate_reason(reason: Any) -> None:
    """An approval reason names a gate: the rules of a gate's own reason apply.

    Raises:
        WorkflowInputError: naming the problem.
    """
    try:
        check_step_name(reason)
    except WorkflowDefinitionError as exc:
        raise WorkflowInputError(f"invalid approval reason: {exc}") from None
    limit = STEP_KEY_MAX_LENGTH - len(approvals.GATE_PREFIX)
    if len(reason) > limit:
        raise WorkflowInputError(
            f"the approval reason is {len(reason)} characters long; the limit is {limit}")


def _deadline(timeout: Any) -> Any:
    """The moment ``timeout`` (seconds or a duration string) ends, or None.

    Raises:
        WorkflowInputError: The timeout is not a valid duration.
    """
    if timeout is None:
        return None
    try:
        return clock().after(parse_duration(timeout, what="timeout"))
    except ValueError as exc:
        raise WorkflowInputError(str(exc)) from None


# How the runs started in this context were started (``started_from``).
_wire: ContextVar[dict[str, Any] | None] = ContextVar("pikku_wire", default=None)


@contextmanager
def started_from(wire: dict[str, Any]) -> Iterator[None]:
    """Record ``wire`` (``{"type": "http"}``, ``"admin"``, ``"cli"``...) on the runs
    started in this block: how a run was started, shown by the console and the API."""
    token = _wire.set(wire)
    try:
        yield
    finally:
        _wire.reset(token)


def start_workflow(
    name: str,
    input: Any = None,
    *,
    inline: bool | None = None,
    start_node: str | None = None,
    owner: Any = None,
    idempotency_key: str | None = None,
    start_at: datetime | None = None,
    delay: float | int | str | None = None,
    run_timeout: float | int | str | None = None,
    debounce: Debounce | None = None,
) -> WorkflowRun:
    """Create a run of workflow ``name`` and start it (or, with ``start_at`` or ``delay``,
    leave it ``scheduled`` until then: the time keeper starts it from the database).

    A workflow declaring ``concurrency`` starts the run only if a slot of its key is
    free; else its ``on_full`` policy decides (queued ``scheduled``, skipped
    ``cancelled``, or the oldest holder cancelled). See docs/flow-control.md.

    Args:
        name: A registered workflow name.
        input: The run input (JSON-serializable, at most ``MAX_INPUT_BYTES``).
        inline: Run in this process; ``None`` follows the ``EXECUTOR`` setting.
        start_node: For graph workflows: the declared entry node to start at.
        owner: The user (or user id) who owns the run.
        idempotency_key: Starting again with the same key, the same owner and the same
            input returns the existing run. Keys are scoped per (workflow, owner); runs
            without an owner share one system scope.
        start_at: An aware datetime: the run stays ``scheduled`` until then (a moment
            already past starts it now).
        delay: A duration (seconds or ``"10min"``): ``start_at`` is now + ``delay``.
            At most one of ``start_at`` and ``delay``.
        run_timeout: The run fails ``DEADLINE_EXCEEDED`` if unfinished this long (seconds
            or a duration string) after it starts (default: the workflow's ``timeout``).
        debounce: A ``Debounce(key, period, max_wait)``: starts with the same key within
            ``period`` replace the waiting run's input and return that run.

    Returns:
        The ``WorkflowRun``; an inline run has already run as far as it can; a delayed,
        debounced or queued run is ``scheduled``; a run skipped for want of a slot is
        ``cancelled`` (code ``CONCURRENCY_LIMITED``).

    Raises:
        WorkflowNotFoundError: No workflow is registered as ``name``.
        WorkflowInputError: The input is invalid, not JSON-serializable or too large, or
            ``start_at``/``delay`` is invalid.
        WorkflowIdempotencyError: The key was used in this scope with another input.
    """
    return start_or_replay(name, input, inline=inline, start_node=start_node, owner=owner,
                           idempotency_key=idempotency_key, start_at=start_at,
                           delay=delay, run_timeout=run_timeout, debounce=debounce).run


def _start_moment(start_at: Any, delay: Any) -> datetime | None:
    """When a delayed start starts (None: now).

    Raises:
        WorkflowInputError: both given, ``start_at`` not an aware datetime, ``delay`` not
            a duration.
    """
    if start_at is not None and delay is not None:
        raise WorkflowInputError("give start_at or delay, not both")
    if delay is not None:
        try:
            return clock().after(parse_duration(delay, what="delay"))
        except ValueError as exc:
            raise WorkflowInputError(str(exc)) from None
    if start_at is None:
        return None
    if not isinstance(start_at, datetime) or start_at.utcoffset() is None:
        raise WorkflowInputError(
            f"start_at must be an aware datetime (with a time zone), not {_shown(start_at)}")
    return start_at.astimezone(UTC)


@dataclass(frozen=True)
class Started:
    """A run ``start_or_replay`` started, or found (``replayed``) by its idempotency key."""

    run: WorkflowRun
    replayed: bool


def _replay(name: str, owner_id: Any, key: str, data: Any) -> WorkflowRun | None:
    """The run this start replays (same workflow, owner scope and key), if any.

    Raises:
        WorkflowIdempotencyError: That run was started with another input.
    """
    existing = WorkflowRun.objects.filter(
        workflow=name, owner_id=owner_id, idempotency_key=key).first()
    if existing is not None and existing.input != data:
        raise WorkflowIdempotencyError(
            f"the idempotency key {key!r} already started run {existing.pk} of workflow "
            f"'{name}' with another input", run_id=existing.pk)
    return existing


def start_or_replay(
    name: str,
    input: Any = None,
    *,
    inline: bool | None = None,
    start_node: str | None = None,
    owner: Any = None,
    idempotency_key: str | None = None,
    start_at: datetime | None = None,
    delay: float | int | str | None = None,
    run_timeout: float | int | str | None = None,
    debounce: Debounce | None = None,
) -> Started:
    """``start_workflow``, also saying whether the idempotency key found an earlier run.

    Raises:
        The errors of ``start_workflow``.
    """
    definition = registry.workflow(name)
    begins = _start_moment(start_at, delay)
    delayed = begins is not None and begins > clock().now()
    wire = _wire.get() or {"type": "python"}
    if start_node is not None:
        entry = getattr(definition, "entry", ())
        if start_node not in entry:
            raise WorkflowInputError(
                f"'{start_node}' is not a declared entry node of workflow '{name}'"
                + (f" (entry nodes: {', '.join(entry)})" if entry else
                   ": it is not a graph workflow")
            )
        wire = {**wire, "start_node": start_node}
    data = _validated_input(definition, input)
    _check_idempotency_key(idempotency_key)
    timeout = flow.check_timeout(run_timeout, "run_timeout")
    if timeout is None:
        timeout = flow.timeout_of(definition)
    if debounce is not None:
        if not isinstance(debounce, Debounce):
            raise WorkflowInputError(
                f"debounce must be a Debounce(key, period, max_wait), not {_shown(debounce)}")
        if begins is not None or idempotency_key is not None:
            raise WorkflowInputError(
                "debounce cannot be combined with start_at, delay or idempotency_key")
    concurrency = flow.concurrency_of(definition)
    concurrency_key = None if concurrency is None else \
        flow.key_for(concurrency, data, name)
    if inline is None:
        inline = pikku_settings.EXECUTOR == "inline"
    executor = get_executor(inline)
    check_startable(definition)
    analysis = definition.analysis
    owner_id = _owner_id(owner)
    fields = dict(
        workflow=name, input=data, inline=inline, owner_id=owner_id,
        graph_hash=analysis.graph_hash, deterministic=analysis.deterministic,
        planned_steps=analysis.planned_steps, wire=wire,
        idempotency_key=idempotency_key, concurrency_key=concurrency_key,
        run_timeout=timeout,
    )
    if debounce is not None:
        return Started(_debounced(fields, debounce), replayed=False)
    if delayed:
        fields.update(status=RunStatus.SCHEDULED, start_at=begins)
    else:
        if timeout is not None:
            fields["deadline_at"] = clock().after(timeout)
        if inline:
            # Created leased by this process: its first pass needs no lease or step reads.
            fields.update(store.leased_fields(store.new_lease_owner()))
    admission: flow.Admission | None = None
    if idempotency_key is not None:
        existing = _replay(name, owner_id, idempotency_key, data)
        if existing is not None:
            return Started(existing, replayed=True)
        try:
            with transaction.atomic():
                run, admission = _create(fields, concurrency, delayed)
        except IntegrityError:
            # A concurrent start with the same key won the unique constraint.
            existing = _replay(name, owner_id, idempotency_key, data)
            if existing is None:
                raise
            return Started(existing, replayed=True)
    else:
        run, admission = _create(fields, concurrency, delayed)
    _admitted(admission)
    if run.status != RunStatus.RUNNING:
        # Delayed (the time keeper starts it at start_at), queued for a slot or skipped.
        return Started(run, replayed=False)
    executor.enqueue_pass(run.pk, new_run=run)
    if inline and run.status == RunStatus.RUNNING:
        # Unless its first pass ended it (and updated this row), the run moved on
        # without this row: a later pass, or a pass that is waiting.
        try:
            run.refresh_from_db()
        except WorkflowRun.DoesNotExist:
            # Deleted meanwhile (by a step of its own, through the ORM).
            raise WorkflowRunNotFoundError(f"no workflow run has the id '{run.pk}'") from None
    return Started(run, replayed=False)


def _create(fields: dict[str, Any], concurrency: Concurrency | None, delayed: bool, *,
            create: Callable[..., WorkflowRun] = store.create_run,
            ) -> tuple[WorkflowRun, flow.Admission | None]:
    """Insert a started run (a start's, or a fork's: ``create`` writes the row from
    ``fields``); under a concurrency limit, as its key's slots decide."""
    if concurrency is None or delayed:
        return create(**fields), None
    with transaction.atomic():
        name, key = fields["workflow"], fields["concurrency_key"]
        admission = flow.admit(name, key, concurrency)
        if admission.status != RunStatus.RUNNING:
            fields.pop("lease_owner", None)
            fields.pop("lease_expires_at", None)
            fields["status"] = admission.status
        if admission.status == RunStatus.SCHEDULED:
            fields.update(flow.waiting_fields(clock().now()))
        elif admission.status == RunStatus.CANCELLED:
            fields["error"] = flow.skipped_error(name, key, concurrency.max)
            fields["finished_at"] = clock().now()
        run = create(**fields)
    return run, admission


def _admitted(admission: flow.Admission | None) -> None:
    """After a new run's admission committed: end the holders it cancelled
    (``cancel_running``) and start the queued runs it promoted."""
    if admission is None:
        return
    for cancelled in admission.cancelled:
        lifecycle.after_status_change(cancelled, RunStatus.CANCELLED)
    flow.start_runs(admission.promoted)


def _debounced(fields: dict[str, Any], debounce: Debounce) -> WorkflowRun:
    """The run of a debounced start: the one waiting in the key's window (its input
    replaced, its start moved) or a new one."""
    now = clock().now()
    name = fields["workflow"]
    with transaction.atomic():
        run = flow.debounce_window(name, debounce)
        if run is not None:
            info = dict((run.wire or {}).get("debounce") or {})
            first_at = datetime.fromisoformat(info.get("first_at") or now.isoformat())
            info["starts"] = int(info.get("starts") or 1) + 1
            run.input = fields["input"]
            # The last input decides the concurrency key too (the run's slot is taken
            # when its window ends).
            run.concurrency_key = fields["concurrency_key"]
            run.start_at = flow.debounce_start_at(first_at, now, debounce)
            run.wire = {**(run.wire or {}), "debounce": info}
            run.updated_at = now
            run.save(update_fields=["input", "concurrency_key", "start_at", "wire",
                                    "updated_at"])
            return run
        wire = {**fields["wire"], "debounce": {
            "key": debounce.key, "period": debounce.period_seconds,
            "max_wait": debounce.max_wait_seconds, "first_at": now.isoformat(),
            "starts": 1}}
        return store.create_run(**{
            **fields, "wire": wire, "status": RunStatus.SCHEDULED,
            "waiting_for": flow.WAITING_DEBOUNCE, "debounce_key": debounce.key,
            "start_at": flow.debounce_start_at(now, now, debounce)})


def flow_wait(run: WorkflowRun) -> str:
    """Why a ``scheduled`` run waits, in the run page's words: a concurrency slot of its
    workflow and key (with the number of runs holding one), or its debounce window; ""
    for any other run (DESIGN 8.4)."""
    if run.status != RunStatus.SCHEDULED:
        return ""
    if run.waiting_for == flow.WAITING_CONCURRENCY and run.concurrency_key is not None:
        held = len(flow.holders(run.workflow, run.concurrency_key))
        return (f"waiting for a concurrency slot of {run.workflow} (key "
                f"{run.concurrency_key}): {held} running")
    if run.waiting_for == flow.WAITING_DEBOUNCE:
        starts = ((run.wire or {}).get("debounce") or {}).get("starts", 1)
        when = run.start_at.isoformat() if run.start_at else "?"
        return (f"waiting for its debounce window (key {run.debounce_key}) to end at "
                f"{when}, after {starts} start(s)")
    return ""


def run_to_completion(
    name: str, input: Any = None, *, owner: Any = None, timeout: float | None = None
) -> Any:
    """Run workflow ``name`` inline and return its output.

    Raises:
        WorkflowRunFailedError: The run failed.
        WorkflowRunCancelledError: The run was cancelled.
        WorkflowRunSuspendedError: The run suspended (it waits for a resume or approval).
        TimeoutError: ``timeout`` seconds passed while the run waited.
    """
    return _outcome(run_until_settled(name, input, owner=owner, timeout=timeout))


def run_until_settled(
    name: str, input: Any = None, *, owner: Any = None, timeout: float | None = None,
    return_at_deadline: bool = False,
) -> WorkflowRun:
    """Run workflow ``name`` inline until it is terminal or suspended; returns the run.

    ``run_to_completion`` without the exceptions: the caller reads the run's status.

    When ``timeout`` passes while the run waits (a sleep or a retry delay that ends after
    it, queued steps, child runs), the run is left as it is: ``running``, its lease given
    back, its wake-up recorded on the step (``wake_at``). Nothing in this process goes on
    with it; the recovery sweep (``pikku_recover``, every ``pikku_worker``) passes it
    again once the wake-up is due, and workers finish the queued steps. A step that is
    running in this process when the timeout passes is not interrupted: the timeout is
    noticed when the run next waits.

    Args:
        name: A registered workflow name.
        input: The run input.
        owner: The user (or user id) who owns the run.
        timeout: The most seconds to wait (a number or a duration string); None: no limit.
        return_at_deadline: Return the run, still ``running``, when ``timeout`` passes,
            instead of raising ``TimeoutError``.

    Raises:
        WorkflowNotFoundError: No workflow is registered as ``name``.
        WorkflowInputError: The input is invalid, not JSON-serializable or too large, or
            the timeout is not a valid duration.
        TimeoutError: ``timeout`` seconds passed while the run waited (unless
            ``return_at_deadline``).
    """
    definition = registry.workflow(name)
    data = _validated_input(definition, input)
    deadline = _deadline(timeout)
    check_startable(definition)
    analysis = definition.analysis
    concurrency = flow.concurrency_of(definition)
    run_timeout = flow.timeout_of(definition)
    run, admission = _create(dict(
        workflow=name, input=data, inline=True, owner_id=_owner_id(owner),
        graph_hash=analysis.graph_hash, deterministic=analysis.deterministic,
        planned_steps=analysis.planned_steps, wire=_wire.get() or {"type": "internal"},
        concurrency_key=None if concurrency is None else flow.key_for(concurrency, data, name),
        run_timeout=run_timeout,
        deadline_at=None if run_timeout is None else clock().after(run_timeout),
        **store.leased_fields(store.new_lease_owner()),
    ), concurrency, False)
    _admitted(admission)
    try:
        if run.status == RunStatus.RUNNING:
            get_executor(True).enqueue_pass(run.pk, new_run=run, deadline=deadline)
        # (A run queued for a concurrency slot is waited for too: a holder's end starts it.)
        return _await_settled(run.pk, deadline)
    except TimeoutError:
        if not return_at_deadline:
            raise
        return store.load_run(run.pk)


def _await_settled(run_id: RunId, deadline: Any) -> WorkflowRun:
    """Wait while the run waits on queued steps (or child runs) that workers will finish."""
    wait = 0.01
    while True:
        run = store.load_run(run_id)
        queued = run.status == RunStatus.SCHEDULED and \
            run.waiting_for == flow.WAITING_CONCURRENCY
        if not queued and (run.status != RunStatus.RUNNING
                           or _waits_only_on_suspended_children(run)):
            return run
        if deadline is not None and clock().now() >= deadline:
            raise TimeoutError(f"run {run_id} is still running at its deadline")
        clock().sleep(wait)
        wait = min(wait * 1.6, 0.5)


def _waits_only_on_suspended_children(run: WorkflowRun) -> bool:
    live = WorkflowStep.objects.filter(run=run, status__in=(
        StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.RUNNING))
    return live.exists() and not live.exclude(child_run__status=RunStatus.SUSPENDED).exists()


def _outcome(run: WorkflowRun) -> Any:
    error = run.error or {}
    if run.status == RunStatus.COMPLETED:
        return run.output
    if run.status == RunStatus.FAILED:
        raise WorkflowRunFailedError(error.get("message", "workflow failed"),
                                     run_id=run.pk, error=error)
    if run.status == RunStatus.CANCELLED:
        raise WorkflowRunCancelledError(error.get("message", "workflow cancelled"), run_id=run.pk)
    if run.status == RunStatus.SUSPENDED:
        raise WorkflowRunSuspendedError(
            f"run {run.pk} is suspended: {error.get('message', '')}", run_id=run.pk
        )
    raise WorkflowRunSuspendedError(
        f"run {run.pk} waits for a suspended child run", run_id=run.pk)


def get_run_status(run_id: RunId) -> RunDetail:
    """The run detail dict (the same shape as the REST run detail).

    Args:
        run_id: The run.

    Returns:
        A plain dict (a ``RunDetail``), built without Django REST framework.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
    """
    return run_detail(store.load_run(run_id))


def _continue(run: WorkflowRun) -> None:
    get_executor(run.inline).enqueue_pass(run.pk)


SendResult = events.SendResult
old_events = events.old_events
old_messages = events.old_messages
prune_events = events.prune


def send_event(event: str, data: Any = None, *, key: str | None = None,
               idempotency_key: str | None = None, sent_by: Any = None) -> SendResult:
    """Store the event ``event`` and wake the runs waiting for it (DESIGN section 8.2).

    Every run waiting on ``(event, key)`` whose wait may consume it is woken once the
    event is committed (an inline run continues in this process before this returns);
    runs that reach such a wait later consume it then, if it was stored after they were
    created. ``key=None`` matches only waits with no key.

    Args:
        event: The event's name (non-empty, at most 255 characters).
        data: What the waits return (JSON, at most ``MAX_INPUT_BYTES``).
        key: Narrows the event to the waits with this key (an order id...).
        idempotency_key: Sends nothing twice: the same key with the same content returns
            the first event (``created=False``).
        sent_by: The user who sent it (recorded), or None.

    Returns:
        ``SendResult(id, woken, created)``.

    Raises:
        WorkflowInputError: An invalid name, key or data (nothing is written).
        WorkflowIdempotencyError: The idempotency key was used with other content
            (``IDEMPOTENCY_CONFLICT``, 409; nothing is written).
    """
    return events.send_event(event, data, key=key, idempotency_key=idempotency_key,
                             sent_by=sent_by)


def send(run_id: RunId, data: Any = None, *, topic: str = "default",
         idempotency_key: str | None = None, sent_by: Any = None) -> SendResult:
    """Send a message to one run on ``topic``; its ``wf.recv`` receives it (first in,
    first out per topic). A run waiting for it is woken once the message is committed.

    Args:
        run_id: The run.
        data: What ``wf.recv`` returns (JSON, at most ``MAX_INPUT_BYTES``).
        topic: The topic (non-empty, at most 255 characters).
        idempotency_key: Per run: the same key with the same content returns the first
            message (``created=False``).
        sent_by: The user who sent it (recorded), or None.

    Returns:
        ``SendResult(id, woken, created)``.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished (409).
        WorkflowInputError: An invalid topic, key or data (nothing is written).
        WorkflowIdempotencyError: The idempotency key was used with other content (409).
    """
    return events.send(run_id, data, topic=topic, idempotency_key=idempotency_key,
                       sent_by=sent_by)


def get_run_state(run_id: RunId) -> dict[str, Any]:
    """The run's state keys (what it published with ``set_state``), without the
    engine's own keys (those starting with ``__``).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
    """
    state = store.load_run(run_id).state or {}
    return {name: value for name, value in state.items() if not name.startswith("__")}


def resume_run(run_id: RunId, data: Any = None) -> WorkflowRun:
    """Resume a suspended run; it is ``running`` again before this returns control.

    Args:
        run_id: The run's id.
        data: What the ``wf.suspend()`` that paused the run returns (JSON).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run is not suspended, or waits at an approval gate
            (code ``WAITING_FOR_APPROVAL``: answer it with ``approve_step``).
        WorkflowInputError: ``data`` is not JSON-serializable or over ``MAX_INPUT_BYTES``.
    """
    data = _checked_data(data, "the resume data")
    run = store.load_run(run_id)
    with transaction.atomic():
        run = store.lock_run(run.pk)  # the gate to open is the one it waits at now
        approval = approval_wait(run.error) if run.status == RunStatus.SUSPENDED else None
        code = (run.error or {}).get("code") if run.status == RunStatus.SUSPENDED else None
        if code in (SuspensionCode.WAITING_FOR_EVENT, SuspensionCode.WAITING_FOR_MESSAGE):
            # A resume would only pass the run back to the same open wait (DESIGN 1.1).
            what = ("an event (send it: send_event, the API's events/)"
                    if code == SuspensionCode.WAITING_FOR_EVENT else
                    "a message (send it: send, the API's runs/{id}/messages/)")
            raise WorkflowRunStateError(
                f"run {run.pk} waits for {what}, or cancel the run; resume does not apply",
                code=code)
        if approval is not None:
            # A resume would only pass the run to the same closed gate (DESIGN 1.1).
            raise WorkflowRunStateError(
                f"run {run.pk} waits for the approval '{step_label(approval)}': answer it "
                "(approve_step, the API's approve/, the console's Approve or Reject) or "
                "cancel the run; resume does not apply",
                code=SuspensionCode.WAITING_FOR_APPROVAL)
        readmitted = _readmit(run, expected=(RunStatus.SUSPENDED,))
        if readmitted is None:
            raise WorkflowRunStateError(
                f"run {run.pk} is {run.status}, not suspended: there is nothing to resume"
            )
        # Only an explicit resume opens the suspend gate the run is waiting at.
        gate = (run.error or {}).get("step") or ""
        if gate.startswith(SUSPEND_PREFIX):
            opened = store.open_suspend_gate(run.pk, gate, data)
            if opened is not None:
                events.end_resumed_suspend(run.pk, gate)
            if opened is not None and step_succeeded.receivers:
                send_step_event(step_succeeded, opened, None, finished_at=opened.updated_at)
    _carry_on(run, readmitted)
    return store.load_run(run.pk)


def _readmit(run: WorkflowRun, *, expected: tuple[str, ...]) -> flow.Admission | None:
    """Move ``run`` from one of ``expected`` to ``running``, or, if it held no
    concurrency slot and none is free for it now, to ``scheduled`` waiting for one (inside
    the caller's transaction). None: it was in no ``expected`` state."""
    if run.status not in expected:
        return None
    concurrency = None
    if run.concurrency_key is not None and not flow.holds_slot(run):
        concurrency = flow.concurrency_of(registry.find_workflow(run.workflow))
    if concurrency is None:
        moved = store.set_run_status(run.pk, RunStatus.RUNNING, expected=expected)
        return flow.Admission(RunStatus.RUNNING, [], []) if moved else None
    with transaction.atomic():
        admission = flow.readmit(run, concurrency)
        if not store.set_run_status(run.pk, admission.status, expected=expected):
            return None
        if admission.status == RunStatus.SCHEDULED:
            WorkflowRun.objects.filter(pk=run.pk).update(
                lease_owner="", lease_expires_at=None,
                **flow.waiting_fields(clock().now()))
    return admission


def _carry_on(run: WorkflowRun, admission: flow.Admission) -> None:
    """After ``_readmit`` committed: start the runs it promoted, and the run's next pass
    unless it waits for a slot."""
    flow.start_runs(admission.promoted)
    if admission.status == RunStatus.RUNNING:
        _continue(run)


@dataclass(frozen=True)
class ApprovalAnswer:
    """What became of a decision (the REST API's ``approve/`` answer).

    Attributes:
        run: The run's id.
        step: The gate's step name as the API shows it (``approval:<reason>``).
        status: ``"decided"`` (the gate took it), ``"rejected"`` (the gate's policy or
            serializer refused it: ``errors`` says why; the gate stays open) or
            ``"recorded"`` (it waits for the run to reach or judge the gate).
        decision: The decision (as the gate's serializer returned it, once decided).
        errors: Why the gate rejected it, else None.
    """

    run: RunId
    step: str
    status: str
    decision: Any
    errors: Any = None

    def as_dict(self) -> dict[str, Any]:
        answer = {"run": str(self.run), "step": self.step, "status": self.status,
                  "decision": self.decision}
        if self.errors is not None:
            answer["errors"] = self.errors
        return answer


def approval_gates(run: WorkflowRun) -> list[str]:
    """The reasons of the approval gates ``run`` has reached or its workflow's code
    declares with a literal reason, in that order (a reason built at run time is known
    once the run reaches its gate)."""
    reached = [(data or {}).get("reason") for data in WorkflowStep.objects.filter(
        run=run, step_name__startswith=approvals.GATE_PREFIX).order_by("id").values_list(
        "data", flat=True)]
    try:
        nodes = registry.workflow(run.workflow).analysis.graph["nodes"]
    except WorkflowNotFoundError:
        nodes = []  # no longer deployed: only what the run recorded counts
    declared = [node.get("reason") for node in nodes if node.get("kind") == "approval"]
    return list(dict.fromkeys(r for r in [*reached, *declared] if isinstance(r, str)))


def approve_step(run_id: RunId, reason: str, decision: Any, *, user: Any = None) -> WorkflowRun:
    """Answer the approval gate ``reason`` of a run with ``decision``.

    The decision is recorded as given and judged (policy, serializer, deadline) when
    the run reaches the gate; a decision sent before that waits for it. See
    ``answer_approval`` for what became of it.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished.
        WorkflowUnknownGateError: ``reason`` names no approval gate the run has reached
            or its code declares (nothing is written).
        WorkflowApprovalResolvedError: The gate is already decided or expired.
        WorkflowApprovalForbiddenError: The gate's policy refuses ``user``.
        WorkflowInputError: The reason is not a valid gate reason, or the decision is not
            JSON-serializable or over ``MAX_INPUT_BYTES``.
    """
    return store.load_run(answer_approval(run_id, reason, decision, user=user).run)


def answer_approval(run_id: RunId, reason: str, decision: Any, *,
                    user: Any = None) -> ApprovalAnswer:
    """``approve_step``, answering what became of the decision rather than the run.

    Raises:
        The errors of ``approve_step``.
    """
    _check_gate_reason(reason)
    decision = _checked_data(decision, f"the decision for approval '{reason}'")
    run = store.load_run(run_id)
    user_id = _owner_id(user)
    keys = approvals.gate_keys(reason)

    def refused(outcome: str, error: WorkflowError, step: str = keys[0]) -> WorkflowError:
        # Every refused answer leaves an audit entry saying why, as accepted ones do.
        approvals.audit(run_id=run.pk, reason=reason, step=step, user_id=user_id,
                        outcome=outcome, refusal=str(error))
        return error

    if run.is_terminal:
        raise refused("run_finished", WorkflowRunStateError(
            f"run {run.pk} is {run.status}: its approvals are closed"))
    gates = approval_gates(run)
    if reason not in gates:
        raise refused("unknown_gate", WorkflowUnknownGateError(
            f"run {run.pk} has no approval gate {reason!r}: none reached, and none its "
            "workflow's code declares", gates=gates))
    gates_reached = {s.step_name: s for s in
                     WorkflowStep.objects.filter(run=run, step_name__in=keys)}
    key = next(k for k in keys
               if k not in gates_reached or gates_reached[k].status != StepStatus.SUCCEEDED)
    gate = gates_reached.get(key)
    if gate is None and gates_reached:
        last_key = max(gates_reached, key=lambda k: gates_reached[k].pk)
        raise refused("already_settled", WorkflowApprovalResolvedError(
            f"approval '{reason}' of run {run.pk} is already "
            f"{(gates_reached[last_key].result or {}).get('status', 'settled')}"
        ), last_key)
    now = clock().now()
    if gate is not None:
        refusal = approvals.policy_refusal(gate.data or {}, run.owner_id, user)
        if refusal:
            raise refused("denied", WorkflowApprovalForbiddenError(refusal), key)
        if gate.wake_at is not None and now >= gate.wake_at:
            _wake(run)  # let the run settle the gate as expired
            raise refused("expired", WorkflowApprovalResolvedError(
                f"approval '{reason}' of run {run.pk} expired at {gate.wake_at.isoformat()}"
            ), key)
    record = {"decision": decision, "decided_by": user_id, "decided_at": now.isoformat(),
              "errors": None}
    with transaction.atomic():
        store.lock_run(run.pk)
        store.merge_state_key(run.pk, approvals.record_key(key), record)
    # Not audited here: the gate judges the decision (policy, serializer, deadline) when
    # the run reaches it and writes the one audit entry of its outcome.
    _wake(run)
    return _approval_outcome(run, key, record)


def _approval_outcome(run: WorkflowRun, key: str, record: dict[str, Any]) -> ApprovalAnswer:
    """What the gate ``key`` made of ``record`` so far (an inline run has judged it)."""
    answer = ApprovalAnswer(run=run.pk, step=public_step_name(key), status="recorded",
                            decision=record["decision"])
    gate = WorkflowStep.objects.filter(run=run, step_name=key).first()
    result = (gate.result or {}) if gate is not None else {}
    if gate is not None and gate.status == StepStatus.SUCCEEDED:
        if result.get("decided_at") == record["decided_at"]:
            return replace(answer, status="decided", decision=result.get("data"))
        return answer
    kept = store.read_state_key(run.pk, approvals.record_key(key)) or {}
    if kept.get("decided_at") == record["decided_at"] and kept.get("errors"):
        return replace(answer, status="rejected", errors=kept["errors"])
    return answer


def _wake(run: WorkflowRun) -> None:
    """Give a suspended run another pass (a running one will see the change itself); a
    run that held no concurrency slot may have to wait for one first."""
    admission = _readmit(run, expected=(RunStatus.SUSPENDED,))
    if admission is not None:
        _carry_on(run, admission)


def cancel_run(run_id: RunId, reason: str | None = None) -> WorkflowRun:
    """Cancel a scheduled, running or suspended run and its child runs; nothing more runs
    for them (a ``scheduled`` run never starts).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run already finished.
        WorkflowInputError: ``reason`` is not None or non-empty text of at most
            ``CANCEL_REASON_MAX_LENGTH`` characters without control characters (line
            breaks and tabs are fine).
    """
    _check_cancel_reason(reason)
    return lifecycle.cancel_run(run_id, reason)


def retry_run(run_id: RunId) -> WorkflowRun:
    """Retry a failed run: its failed steps get a fresh budget and the run carries on.

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowRunStateError: The run is not failed.
    """
    run = store.load_run(run_id)
    with transaction.atomic():
        admission = _readmit(run, expected=(RunStatus.FAILED,))
        if admission is None:
            raise WorkflowRunStateError(f"run {run.pk} is {run.status}, not failed")
        if run.run_timeout is not None:
            # A retry starts a fresh deadline (DESIGN 8.4).
            run.deadline_at = clock().after(run.run_timeout)
            WorkflowRun.objects.filter(pk=run.pk).update(deadline_at=run.deadline_at)
        failed_children = store.reopen_failed_steps(run.pk)
    for child_id in failed_children:
        retry_run(child_id)  # its end wakes this run
    _carry_on(run, admission)
    return store.load_run(run.pk)


#: The longest fork reason (the REST API's limit too).
FORK_REASON_MAX_LENGTH = 1000


def _check_fork_reason(reason: object) -> None:
    """A fork reason is text (empty allowed) of at most ``FORK_REASON_MAX_LENGTH``
    characters without control characters but line breaks and tabs.

    Raises:
        WorkflowInputError: naming the problem.
    """
    if not isinstance(reason, str):
        raise WorkflowInputError(f"a fork reason must be a string, not {_shown(reason)}")
    _check_reason_text("fork", reason, FORK_REASON_MAX_LENGTH)


def fork_preview(run_id: RunId, from_step: str | None = None) -> forks.ForkPlan:
    """What ``fork_run(run_id, from_step=from_step)`` would keep and rerun; writes nothing
    and checks no replay (the console's confirmation page shows it).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowForkError: ``FORK_NOT_TERMINAL`` or ``FORK_UNKNOWN_STEP``.
        WorkflowNotFoundError: The run's workflow is no longer registered.
    """
    return forks.plan_fork(store.load_run(run_id), from_step)


def fork_run(run_id: RunId, *, from_step: str | None = None, input: Any = None,
             reason: str = "", user: Any = None) -> WorkflowRun:
    """Rerun a finished run (or one the deployed code no longer replays) from one of its
    steps, as a new run (a fork) on today's code.

    The fork keeps the steps the source recorded before ``from_step`` (their results,
    attempts and child runs); ``from_step`` and everything after it run again. A
    ``wf.parallel`` call that holds ``from_step`` reruns whole; in a graph workflow the
    node and every node downstream of it rerun. Before anything is written, the current
    code is replayed over the kept steps without calling any function: if it asks for a
    step the source did not record there, nothing is written (what it asks after the kept
    steps is the rerun's: the chosen step or the code that replaced it). The source is
    never changed.

    Args:
        run_id: A completed, failed or cancelled run, or one suspended with
            ``VERSION_CONFLICT`` (the source stays suspended: cancel it once the fork runs).
        from_step: The step to rerun from: its key (``Charge#1``) or its name as the API
            lists it (``approval:Sign-off``); None: the first failed step, else the start
            (for a ``VERSION_CONFLICT``, the step where today's code stops replaying it).
        input: The fork's input; None: the source's.
        reason: Why (shown with the fork and in the run's audit).
        user: Who asks (``forked_by``); the fork's owner is the source's.

    Returns:
        The fork, started as a new run is (an inline fork has run as far as it can): a
        workflow with ``Concurrency`` admits it as a start, by the key of its input
        (``scheduled`` waiting for a slot, ``cancelled`` by ``skip``, or running after
        ``cancel_running``).

    Raises:
        WorkflowRunNotFoundError: No run has this id.
        WorkflowForkError: ``FORK_NOT_TERMINAL`` (409), ``FORK_UNKNOWN_STEP`` (400), or
            ``FORK_DIVERGES`` (409: the current code does not replay the kept steps; the
            error names the step it asks for and the step the source recorded).
        WorkflowInputError: ``input`` or ``reason`` is invalid.
        WorkflowNotFoundError: The run's workflow is no longer registered.
        WorkflowVersionDeclinedError: Its current version is declined.
    """
    _check_fork_reason(reason)
    source = store.load_run(run_id)
    definition = registry.workflow(source.workflow)
    data = source.input if input is None else _validated_input(definition, input)
    new_input = forks.UNSET if input is None else data
    inline = pikku_settings.EXECUTOR == "inline"
    executor = get_executor(inline)
    wire = dict(_wire.get() or {"type": "python"})
    if (source.wire or {}).get("start_node"):
        wire["start_node"] = source.wire["start_node"]  # a graph run's chosen entry
    analysis = definition.analysis
    # A fork is admitted as a start is (DESIGN 8.4): its key is read from its input, by
    # today's declaration.
    concurrency = flow.concurrency_of(definition)
    key = None if concurrency is None else flow.key_for(concurrency, data, source.workflow)
    with transaction.atomic():
        # Held until the fork is written: a retry_run cannot move the source meanwhile.
        source = store.lock_run(source.pk)
        plan = forks.plan_fork(source, from_step, input=new_input)
        forks.check_prefix(plan, input=new_input)
        check_startable(definition)
        fork, admission = _create(dict(
            workflow=source.workflow, input=data, inline=inline, owner_id=source.owner_id,
            graph_hash=analysis.graph_hash, deterministic=analysis.deterministic,
            planned_steps=analysis.planned_steps, wire=wire, concurrency_key=key,
            fork_step=plan.cut, fork_reason=reason, forked_by_id=_owner_id(user),
        ), concurrency, False, create=lambda **fields: store.create_fork(
            source, plan.kept_rows, state=plan.fork_state(), **fields))
    _admitted(admission)
    if fork.status == RunStatus.RUNNING:
        executor.enqueue_pass(fork.pk, new_run=fork)
    return store.load_run(fork.pk)


__all__ = [
    "ApprovalAnswer",
    "Started",
    "answer_approval",
    "approval_gates",
    "approve_step",
    "backfill_schedule",
    "cancel_run",
    "fork_preview",
    "fork_run",
    "get_run_status",
    "get_schedule",
    "next_fire_times",
    "old_ticks",
    "pause_schedule",
    "prune_ticks",
    "resume_run",
    "resume_schedule",
    "retry_run",
    "run_to_completion",
    "schedule_fields",
    "start_or_replay",
    "start_workflow",
    "sync_schedules",
    "trigger_schedule",
    "validate_schedule",
]
