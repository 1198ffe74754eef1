"""``WorkflowContext`` (the ``wf`` of a workflow body) and ``StepContext`` (a step's ``ctx``)."""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..conf import pikku_settings
from ..declarations import check_name, check_step_options
from ..durations import parse_duration
from ..engine import approvals, events, store, trace_hooks
from ..engine.clock import clock
from ..engine.dispatch import dispatch_batch
from ..engine.lifecycle import ChildDepthExceeded, create_child_run
from ..engine.serialization import NotSerializableError, normalize
from ..engine.steps import (
    StepCall,
    error_dict,
    invocation_id,
    is_exhausted,
    run_queued_step_in_pass,
    run_step,
)
from ..exceptions import (
    WorkflowCancelled,
    WorkflowDefinitionError,
    WorkflowPaused,
    WorkflowStepFailedError,
    WorkflowSuspended,
)
from ..registry import registered_name, registry
from ..status import RunStatus, StepStatus, SuspensionCode, WaitKind
from ..step_keys import PATCH_PREFIX, PUBLIC_GATE_PREFIXES, SUSPEND_PREFIX, public_step_name

if TYPE_CHECKING:
    from ..models import WorkflowRun, WorkflowStep

_MISSING: Any = object()
# A pass notices an external cancel within this many seconds (at its next step start).
RUN_CHECK_INTERVAL = 0.5
#: The length of ``WorkflowStep.step_name``: a step's full key (prefix and ``#N`` included).
STEP_KEY_MAX_LENGTH = 300
# Forms the engine builds keys with: a user's name in one of them would alias another step
# (``approval:``/``suspend:`` are the public names of gates: engine.summary.step_key).
_RESERVED_FORMS = re.compile(r"#\d+$|:onError$|^__workflow_|^(?:"
                             + "|".join(map(re.escape, PUBLIC_GATE_PREFIXES)) + ")")


def _shown(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_patch_id(patch_id: Any) -> None:
    """Refuse a patch id that is not a non-empty printable string of a storable length.

    Raises:
        WorkflowDefinitionError: naming the value and what is wrong with it.
    """
    if not isinstance(patch_id, str) or not patch_id.strip():
        raise WorkflowDefinitionError(
            f"a patch id must be a non-empty string, not {patch_id!r}")
    if not patch_id.isprintable():
        raise WorkflowDefinitionError(
            f"patch id {_shown(patch_id)} contains control or unprintable characters")
    if len(PATCH_PREFIX) + len(patch_id) > STEP_KEY_MAX_LENGTH:
        raise WorkflowDefinitionError(
            f"patch id {_shown(patch_id)} is too long: at most "
            f"{STEP_KEY_MAX_LENGTH - len(PATCH_PREFIX)} characters")


def check_step_name(name: Any) -> None:
    """Refuse a step name (or gate reason) that is empty, not text, or an engine form.

    Raises:
        WorkflowDefinitionError: naming the value and what is wrong with it.
    """
    if not isinstance(name, str) or not name.strip():
        raise WorkflowDefinitionError(f"a step name must be a non-empty string, not {name!r}")
    # isprintable() is a fast test that rules out both categories for most names.
    if not name.isprintable() and any(
            unicodedata.category(char) in ("Cc", "Cs") for char in name):
        raise WorkflowDefinitionError(
            f"step name {_shown(name)} contains control characters or lone surrogates")
    if _RESERVED_FORMS.search(name):
        raise WorkflowDefinitionError(
            f"step name {_shown(name)} is reserved: names ending in '#<number>' or "
            "':onError', or starting with '__workflow_', 'approval:', 'suspend:' or "
            "'patch:', are the keys and names the engine gives repeated steps, "
            "compensations, gates and patch markers")


@dataclass
class StepContext:
    """What a step function receives as its optional second parameter.

    Attributes:
        run_id: The run's id (a string).
        step_name: The physical step key (``name``, ``name#1``...).
        invocation_id: Stable across retries: use it to deduplicate side effects.
        attempt: The attempt number, from 1.
        owner_id: The primary key of the run's owner, or None.
    """

    run_id: str
    step_name: str
    invocation_id: str
    attempt: int
    owner_id: Any = None
    # The pass's unit of work, for a step run in a pass (its writes flush it first).
    _work: store.UnitOfWork | None = field(default=None, repr=False, compare=False)

    def branch(self, key: str) -> None:
        """Choose the branch of a graph node's keyed ``next`` to follow."""
        if not isinstance(key, str) or not key:
            raise WorkflowDefinitionError(f"a branch key must be a non-empty string, not {key!r}")
        store.set_branch(self.run_id, self.step_name, key, self._work)

    def get_state(self) -> dict[str, Any]:
        """The run's state dict, read fresh from the database."""
        return dict(store.load_run(self.run_id).state or {})

    def set_state(self, name: str, value: Any) -> None:
        """Set one key of the run's state (merged in one UPDATE)."""
        check_state_key(name)
        store.merge_state_key(self.run_id, name, value, self._work)


def check_state_key(name: Any) -> None:
    if not isinstance(name, str) or not name or '"' in name or "\\" in name:
        raise WorkflowDefinitionError(
            f"state key {name!r} must be a non-empty string without quotes or backslashes"
        )
    if name.startswith("__"):
        # The engine keeps approval decisions under such keys: writing one would forge a
        # decision no approver gave.
        raise WorkflowDefinitionError(
            f"state key {_shown(name)} is reserved: keys starting with '__' are the engine's")


@dataclass
class WorkflowContext:
    """The ``wf`` argument of a DSL workflow body, rebuilt for every replay pass."""

    run: WorkflowRun
    steps: dict[str, WorkflowStep]
    # The pass's writes (under its lease): every write of the pass goes through it.
    work: store.UnitOfWork
    # The keys the run recorded, in the order it reached them (compensations aside): a
    # replay must reach them again in that order before it reaches anything new.
    recorded: list[str] | None = None
    _replayed: int = 0
    # Queued steps and child runs this pass found in flight: if what they did while the
    # pass unwound is left to it (store.left_to_this_pass), the pass runs again.
    waiting_on: set[str] = field(default_factory=set)
    # Depth of fan-outs (parallel calls, graph waves) the pass is inside.
    fan_out: int = 0
    # When the run row was last checked (lease renewed, not cancelled from outside).
    _checked_at: float = field(default_factory=time.monotonic)
    _ordinals: dict[str, int] = field(default_factory=dict)
    _last_step: str | None = None
    # A graph pass's open waits for events, by step key: the suspension each ended on.
    suspensions: dict[str, WorkflowSuspended] = field(default_factory=dict)

    @property
    def last_step(self) -> str | None:
        """The key of the last step the body reached in this pass (None before any)."""
        return self._last_step

    @cached_property
    def run_id(self) -> str:
        return str(self.run.pk)

    @property
    def name(self) -> str:
        return self.run.workflow

    @property
    def owner_id(self) -> Any:
        return self.run.owner_id

    @property
    def scheduled_at(self) -> datetime | None:
        """The tick time (aware, UTC) of a run a schedule started, else None: the same on
        every replay, so a nightly report can cover "the day before its tick"."""
        return self.run.scheduled_at

    def get_run(self) -> WorkflowRun:
        """The run row, read fresh from the database."""
        return store.load_run(self.run.pk)

    @contextmanager
    def fanning_out(self) -> Iterator[None]:
        """Steps reached in this block belong to one fan-out (spread over the workers)."""
        self.fan_out += 1
        try:
            # Inserts leave the block before the jobs that refer to them.
            with dispatch_batch(), self.work.collecting_inserts():
                yield
        finally:
            self.fan_out -= 1

    # --- step keys ----------------------------------------------------------------------

    def _mint_key(self, name: Any, *, prefix: str = "") -> str:
        check_step_name(name)
        logical = prefix + name
        seen = self._ordinals.get(logical, 0)
        self._ordinals[logical] = seen + 1
        key = logical if seen == 0 else f"{logical}#{seen}"
        if len(key) > STEP_KEY_MAX_LENGTH:
            raise WorkflowDefinitionError(
                f"step name {_shown(name)} is too long: its key '{_shown(key)}' has "
                f"{len(key)} characters; the limit is {STEP_KEY_MAX_LENGTH}")
        if self.recorded is not None and self._replayed < len(self.recorded):
            self._check_replay(key)
        return key

    def _check_replay(self, key: str) -> None:
        """Every replay re-reaches the recorded steps in their order before anything new.

        The code hash cannot see a changed helper, constant or import, so this check runs
        on every replay (a comparison of names): a diverging replay suspends the run with
        ``VERSION_CONFLICT`` before it runs anything, instead of silently diverging.
        """
        assert self.recorded is not None
        expected = self.recorded[self._replayed]
        if key == expected:
            self._replayed += 1
            return
        how = ("out of order" if key in self.steps
               else "which this run never recorded")
        raise WorkflowSuspended({
            "code": "VERSION_CONFLICT", "step": key,
            "message": (
                f"the code of workflow '{self.name}' no longer replays run {self.run_id} "
                f"(started on version {self.run.graph_hash}): it reaches step "
                f"'{public_step_name(key)}', {how}, where the run recorded "
                f"'{public_step_name(expected)}' next; deploy code that "
                "replays the recorded steps, then resume the run"
            ),
        })

    def check_due(self) -> bool:
        """Whether the next step start should re-check the run row (every half second)."""
        now = time.monotonic()
        if now - self._checked_at < RUN_CHECK_INTERVAL:
            return False
        self._checked_at = now
        return True

    def step_context(self, key: str, attempt: int) -> StepContext:
        return StepContext(
            run_id=self.run_id, step_name=key, invocation_id=invocation_id(self.run_id, key),
            attempt=attempt, owner_id=self.run.owner_id, _work=self.work,
        )

    # --- steps ---------------------------------------------------------------------------

    def do(
        self,
        step_name: str,
        fn_or_name: str | Callable[..., Any],
        data: Any = _MISSING,
        *,
        retries: int | None = None,
        retry_delay: float | str | None = None,
        on_error: str | Callable[..., Any] | None = None,
        timeout: float | str | None = None,
        description: str | None = None,
    ) -> Any:
        """Run a step once and memoize its result.

        ``do(name, "fn", data)`` or ``do(name, registered_fn, data)`` runs a registered
        step function; ``do(name, closure)`` runs an inline closure without arguments.

        Returns:
            The step's result (from the database when it already succeeded).

        Raises:
            WorkflowStepFailedError: The step failed after all its attempts.
        """
        from_step = self._last_step
        key = self._mint_key(step_name)
        self._last_step = key
        return self._dispatch(key, fn_or_name, data, retries=retries, retry_delay=retry_delay,
                              on_error=on_error, timeout=timeout, from_step_name=from_step)

    def run_named_step(self, key: str, fn_or_name: str | Callable[..., Any], data: Any,
                       **options: Any) -> Any:
        """Run a step under an exact key (compensation steps: ``<key>:onError``)."""
        return self._dispatch(key, fn_or_name, data, **options)

    def _dispatch(
        self, key: str, fn_or_name: str | Callable[..., Any], data: Any, *,
        retries: int | None = None, retry_delay: float | str | None = None,
        on_error: str | Callable[..., Any] | None = None, timeout: float | str | None = None,
        from_step_name: str | None = None,
    ) -> Any:
        if retries is not None or retry_delay is not None:
            check_step_options(f"step '{key}'", retries=retries, retry_delay=retry_delay)
        on_error_name = self._function_name(on_error, key) if on_error is not None else None
        rpc_name = registered_name(fn_or_name) if callable(fn_or_name) else None
        if rpc_name is None and callable(fn_or_name):
            if data is not _MISSING:
                raise WorkflowDefinitionError(
                    f"step '{key}': {getattr(fn_or_name, '__qualname__', fn_or_name)!r} is not "
                    "a registered function; decorate it with @pw.function, or pass a closure "
                    "without data for an inline step"
                )
            call = StepCall(
                key=key, fn=fn_or_name, rpc_name=None, data=None, takes_data=False,
                retries=_pick(retries, pikku_settings.DEFAULT_RETRIES),
                retry_delay=_pick(retry_delay, pikku_settings.DEFAULT_RETRY_DELAY),
                on_error=on_error_name, from_step_name=from_step_name,
                timeout=_seconds(timeout, key),
            )
            return run_step(self, call)
        if rpc_name is None:
            rpc_name = self._function_name(fn_or_name, key)
        if data is _MISSING:
            data = None
        definition = registry.function(rpc_name)
        if definition is None and registry.find_workflow(rpc_name) is not None:
            return self._child_run(key, rpc_name, data, from_step_name)
        if definition is None:
            return self._missing_function(key, rpc_name, data, from_step_name,
                                          retries=retries, retry_delay=retry_delay)
        call = StepCall(
            key=key, fn=definition.fn, rpc_name=rpc_name, data=data,
            takes_context=definition.takes_context, atomic=definition.atomic,
            retries=_pick(retries, definition.retries, pikku_settings.DEFAULT_RETRIES),
            retry_delay=_pick(retry_delay, definition.retry_delay,
                              pikku_settings.DEFAULT_RETRY_DELAY),
            on_error=on_error_name, from_step_name=from_step_name, limits=definition.limits,
        )
        call.timeout = _seconds(_pick(timeout, definition.timeout, 0), key)
        if definition.queued:
            return run_queued_step_in_pass(self, call, queue=definition.queue)
        return run_step(self, call)

    @staticmethod
    def _function_name(fn_or_name: str | Callable[..., Any], key: str) -> str:
        if isinstance(fn_or_name, str) and fn_or_name:
            return fn_or_name
        name = registered_name(fn_or_name) if callable(fn_or_name) else None
        if name is None:
            raise WorkflowDefinitionError(
                f"step '{key}': expected a registered function or its name, not {fn_or_name!r}"
            )
        return name

    def _missing_function(self, key: str, rpc_name: str, data: Any, from_step: str | None, *,
                          retries: int | None, retry_delay: float | str | None) -> Any:
        step = self.steps.get(key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return step.result
        try:
            data = normalize(data, what=f"the data of step '{key}'")
        except NotSerializableError as exc:
            raise WorkflowStepFailedError(key, str(exc)) from None
        self.work.ensure_step(
            self.steps, key, rpc_name=rpc_name, data=data,
            status=StepStatus.PENDING, from_step_name=from_step,
            retries=_pick(retries, pikku_settings.DEFAULT_RETRIES),
            retry_delay=str(_pick(retry_delay, pikku_settings.DEFAULT_RETRY_DELAY)),
        )
        raise WorkflowSuspended({
            "code": "RPC_NOT_FOUND", "step": key,
            "message": f"step '{key}' calls function '{rpc_name}', which is not registered",
        })

    def parallel(self, calls: Iterable[Sequence[Any]], **step_options: Any) -> list[Any]:
        """Run several ``do`` calls and return their results in order.

        Each call is a tuple of ``do``'s positional arguments. Every call is attempted
        even if an earlier one fails or waits, so each records its own outcome.
        """
        results: list[Any] = []
        failure: WorkflowStepFailedError | None = None
        suspension: WorkflowSuspended | None = None
        pause: WorkflowPaused | None = None
        with self.fanning_out():
            for call in calls:
                if not isinstance(call, tuple | list) or not 2 <= len(call) <= 3:
                    raise WorkflowDefinitionError(
                        f"parallel() takes (step_name, fn[, data]) tuples, not {call!r}"
                    )
                try:
                    results.append(self.do(*call, **step_options))
                except WorkflowStepFailedError as exc:
                    failure = failure or exc
                    results.append(None)
                except WorkflowSuspended as signal:
                    suspension = suspension or signal
                    results.append(None)
                except WorkflowPaused as signal:
                    if pause is None or _earlier(signal.wake_at, pause.wake_at):
                        pause = signal
                    results.append(None)
        for outcome in (failure, suspension, pause):
            if outcome is not None:
                raise outcome
        return results

    def sleep(self, step_name: str, duration: float | str) -> None:
        """Wait ``duration`` durably: the step records when to wake."""
        try:
            seconds = parse_duration(duration, what=f"duration of sleep '{step_name}'")
        except ValueError as exc:
            raise WorkflowDefinitionError(str(exc)) from exc
        self._last_step = key = self._mint_key(step_name)
        step = self.steps.get(key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return
        if step is None:
            wake_at = clock().after(seconds)
            step = self.work.ensure_step(
                self.steps, key, data={"duration": seconds},
                status=StepStatus.SCHEDULED, wake_at=wake_at,
            )
        if step.wake_at is None or step.wake_at <= clock().now():
            store.record_success(step, None, None, work=self.work)
            return
        _waits("sleep", key, step.wake_at)
        raise WorkflowPaused(key, wake_at=step.wake_at)

    def suspend(self, reason: str, *, timeout: float | str | None = None) -> Any:
        """Suspend the run until ``resume_run(run_id, data)``; returns that ``data``.

        Each distinct reason is its own gate; a pass that finds the gate still closed
        suspends again (only an explicit resume opens it).

        Args:
            reason: Names the gate (and what the run's error says).
            timeout: How long to wait for the resume (seconds or a duration such as
                ``"1h"``); None waits for ever.

        Returns:
            The resume's data, or None once ``timeout`` passed first.
        """
        seconds = wait_timeout(timeout, f"suspend {reason!r}")
        from_step = self._last_step
        self._last_step = key = self._mint_key(reason, prefix=SUSPEND_PREFIX)
        step = self.steps.get(key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return step.result
        if step is None:
            timeout_at = clock().after(seconds) if seconds is not None else None
            data: dict[str, Any] = {"reason": reason}
            if seconds is not None:
                data["timeout"] = seconds
            step = self.work.ensure_step(self.steps, key, data=data, wake_at=timeout_at,
                                         status=StepStatus.SUSPENDED, from_step_name=from_step)
        error: dict[str, Any] = {"code": SuspensionCode.WORKFLOW_SUSPENDED.value,
                                 "message": reason, "step": key}
        if step.wake_at is None:
            _waits("suspend", key, None, name=reason)
            raise WorkflowSuspended(error)
        wait = events.open_wait(self.run, key, WaitKind.SUSPEND, reason, None, step.wake_at)
        if events.time_out_suspend(wait):
            store.record_success(step, None, None, work=self.work)
            return None
        _waits("suspend", key, step.wake_at, name=reason)
        error["timeout_at"] = step.wake_at.isoformat()
        raise WorkflowSuspended(error, recheck=lambda: events.news_for(self.run, wait))

    def wait_for_event(self, step_name: str, event: str, *, key: str | None = None,
                       timeout: float | str | None = None) -> Any:
        """Wait for an event sent with ``send_event(event, data, key=key)``.

        The wait consumes the oldest event of ``(event, key)`` stored after the run was
        created that the run has not consumed yet (``key=None`` matches only events sent
        with no key), so an event sent before the run reaches this line is not lost.
        The run holds no worker while it waits (``suspended``, ``WAITING_FOR_EVENT``).

        Args:
            step_name: The step's name (its result is what replay returns).
            event: The event's name.
            key: The event's key (an order id...), or None.
            timeout: How long to wait (seconds or a duration such as ``"1h"``).

        Returns:
            The event's data, or None once ``timeout`` passed first.
        """
        what = f"wait_for_event {step_name!r}"
        check_name(event, f"{what}: the event", error=WorkflowDefinitionError)
        check_name(key, f"{what}: the key", optional=True,
                          error=WorkflowDefinitionError)
        seconds = wait_timeout(timeout, what)
        from_step = self._last_step
        self._last_step = step_key = self._mint_key(step_name)
        return self.wait_for_event_at(step_key, event, key=key, timeout=seconds,
                                      from_step_name=from_step)

    def wait_for_event_at(self, step_key: str, event: str, *, key: str | None,
                          timeout: float | None, from_step_name: str | None = None) -> Any:
        """``wait_for_event`` under an exact step key (a graph node's instance), with a
        checked event and key and a timeout in seconds."""
        step = self.steps.get(step_key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return step.result
        if step is None:
            step = self.work.ensure_step(
                self.steps, step_key, status=StepStatus.SUSPENDED,
                from_step_name=from_step_name,
                wake_at=clock().after(timeout) if timeout is not None else None,
                data={"wait": WaitKind.EVENT.value, "event": event, "key": key,
                      "timeout": timeout})
        wait = events.open_wait(self.run, step_key, WaitKind.EVENT, event, key, step.wake_at)
        outcome = events.receive_event(self.run, wait)
        if outcome.ended:
            store.record_success(step, None, outcome.value, work=self.work)
            return outcome.value
        _waits("event", step_key, wait.timeout_at, name=wait.name, key=wait.key)
        until = f" until {wait.timeout_at.isoformat()}" if wait.timeout_at else ""
        keyed = f" (key {wait.key!r})" if wait.key is not None else ""
        raise WorkflowSuspended({
            "code": SuspensionCode.WAITING_FOR_EVENT.value,
            "message": f"waiting for event {wait.name!r}{keyed}{until}",
            "step": step_key, "event": wait.name, "key": wait.key,
            "timeout_at": wait.timeout_at.isoformat() if wait.timeout_at else None,
        }, recheck=lambda: events.news_for(self.run, wait))

    def recv(self, step_name: str, topic: str = "default", *,
             timeout: float | str | None = None) -> Any:
        """Receive the next message sent to this run with ``send(run_id, data, topic=)``.

        Messages on a topic are received first in, first out, each once. The run holds
        no worker while it waits (``suspended``, ``WAITING_FOR_MESSAGE``).

        Args:
            step_name: The step's name (its result is what replay returns).
            topic: The topic.
            timeout: How long to wait (seconds or a duration such as ``"1h"``).

        Returns:
            The message's data, or None once ``timeout`` passed first.
        """
        what = f"recv {step_name!r}"
        check_name(topic, f"{what}: the topic", error=WorkflowDefinitionError)
        seconds = wait_timeout(timeout, what)
        from_step = self._last_step
        self._last_step = step_key = self._mint_key(step_name)
        step = self.steps.get(step_key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return step.result
        if step is None:
            step = self.work.ensure_step(
                self.steps, step_key, status=StepStatus.SUSPENDED, from_step_name=from_step,
                wake_at=clock().after(seconds) if seconds is not None else None,
                data={"wait": WaitKind.MESSAGE.value, "topic": topic, "timeout": seconds})
        wait = events.open_wait(self.run, step_key, WaitKind.MESSAGE, topic, None,
                                step.wake_at)
        outcome = events.receive_message(self.run, wait)
        if outcome.ended:
            store.record_success(step, None, outcome.value, work=self.work)
            return outcome.value
        _waits("message", step_key, wait.timeout_at, name=wait.name)
        until = f" until {wait.timeout_at.isoformat()}" if wait.timeout_at else ""
        raise WorkflowSuspended({
            "code": SuspensionCode.WAITING_FOR_MESSAGE.value,
            "message": f"waiting for a message on {wait.name!r}{until}",
            "step": step_key, "topic": wait.name,
            "timeout_at": wait.timeout_at.isoformat() if wait.timeout_at else None,
        }, recheck=lambda: events.news_for(self.run, wait))

    def approval(
        self,
        reason: str,
        *,
        serializer: type | None = None,
        expiry: float | str | None = None,
        approvers: str = "any",
        approver_permission: str | None = None,
    ) -> dict[str, Any]:
        """Wait for a person's decision, given with ``approve_step(run_id, reason, ...)``.

        Args:
            reason: Names the gate (and what ``approve_step`` passes).
            serializer: A DRF serializer class validating the decision; an invalid
                decision re-closes the gate (the run never fails for it).
            expiry: How long to wait before the gate settles as expired.
            approvers: ``"any"``, ``"owner"`` or ``"not-initiator"`` (four eyes).
            approver_permission: A Django permission the approver must also have.

        Returns:
            ``{"status": "decided", "data", "decided_by", "decided_at"}`` or
            ``{"status": "expired"}``.
        """
        if approvers not in approvals.APPROVER_POLICIES:
            raise WorkflowDefinitionError(
                f"approval '{reason}': approvers must be one of "
                f"{', '.join(approvals.APPROVER_POLICIES)}, not {approvers!r}"
            )
        try:
            expiry_s = parse_duration(expiry, what="expiry") if expiry is not None else None
        except ValueError as exc:
            raise WorkflowDefinitionError(f"approval '{reason}': {exc}") from exc
        from_step = self._last_step
        self._last_step = key = self._mint_key(reason, prefix=approvals.GATE_PREFIX)
        step = self.steps.get(key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return dict(step.result or {})
        if step is None:
            # Reaching the gate publishes its policy and records its deadline.
            expires_at = clock().after(expiry_s) if expiry_s is not None else None
            step = self.work.ensure_step(
                self.steps, key, status=StepStatus.SUSPENDED, wake_at=expires_at,
                from_step_name=from_step,
                data={"reason": reason, "approvers": approvers, "expiry": expiry_s,
                      "approver_permission": approver_permission,
                      # So that a console can build the decision's form from it.
                      "serializer": (f"{serializer.__module__}.{serializer.__qualname__}"
                                     if serializer is not None else None)},
            )
        outcome, seen = self._judge_gate(step, reason, serializer)
        if outcome is not None:
            store.record_success(step, None, outcome, work=self.work)
            return outcome

        def decision_arrived() -> bool:
            arrived: bool = store.read_state_key(self.run.pk, approvals.record_key(key)) != seen
            return arrived

        _waits("approval", key, step.wake_at, name=reason)
        raise WorkflowSuspended(
            {"code": SuspensionCode.WAITING_FOR_APPROVAL.value, "message": reason,
             "step": key},
            recheck=decision_arrived,
        )

    def _judge_gate(self, step: WorkflowStep, reason: str,
                    serializer: type | None) -> tuple[dict[str, Any] | None, Any]:
        """The gate's outcome if it is settled now (else None), and the record judged.

        A decision recorded after this read is noticed by comparing with the record.
        """
        name = approvals.record_key(step.step_name)
        seen = store.read_state_key(self.run.pk, name)
        record = seen or {}
        deadline = step.wake_at
        decided_at = record.get("decided_at")
        if record.get("decision") is not None and (
            deadline is None or datetime.fromisoformat(str(decided_at)) < deadline
        ):
            user = approvals.load_user(record.get("decided_by"))
            refusal = approvals.policy_refusal(step.data or {}, self.run.owner_id, user)
            errors: Any = [{"message": refusal}] if refusal else None
            value = record["decision"]
            if errors is None and serializer is not None:
                checked = serializer(data=value)
                if checked.is_valid():
                    value = checked.validated_data
                else:
                    errors = checked.errors
            if errors is None:
                try:
                    value = normalize(value, what=f"the decision of approval '{reason}'")
                except NotSerializableError as exc:
                    errors = [{"message": str(exc)}]
            if errors is None:
                approvals.audit(run_id=self.run_id, reason=reason, step=step.step_name,
                                user_id=record.get("decided_by"), outcome="success")
                return {"status": "decided", "data": value,
                        "decided_by": record.get("decided_by"), "decided_at": decided_at}, seen
            # Re-close the gate, keeping why; a newer decision in the meantime wins.
            closed = {**record, "decision": None, "rejected": record["decision"],
                      "errors": normalize(errors, what="approval errors")}
            if store.replace_state_key_if(self.run.pk, name, record, closed, self.work):
                seen = closed
            approvals.audit(run_id=self.run_id, reason=reason, step=step.step_name,
                            user_id=record.get("decided_by"),
                            outcome="denied" if refusal else "invalid",
                            refusal=approvals.describe_errors(errors))
            return None, seen
        if deadline is not None and clock().now() >= deadline:
            return {"status": "expired"}, seen
        return None, seen

    def _child_run(self, key: str, workflow_name: str, data: Any, from_step: str | None) -> Any:
        """A step that runs another workflow as a child run and returns its output."""
        step = self.steps.get(key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            _replayed(step)
            return step.result
        if step is not None and is_exhausted(step):
            error = step.error or {}
            raise WorkflowStepFailedError(key, error.get("message", ""),
                                          error_type=error.get("type"))
        child = store.load_run(step.child_run_id) if step and step.child_run_id else None
        if step is not None and child is not None and step.status == StepStatus.PENDING \
                and child.status != RunStatus.CANCELLED:
            # retry_run reset this step and retried its child where it failed: a new
            # attempt waits for that same child (never a second child run).
            self.work.begin_attempt(step, save_attempt=True)
        elif step is None or child is None or step.status == StepStatus.PENDING:
            # (A cancelled child, for instance one cancelled when this run ended, cannot
            # go on: the retried step starts a new one.)
            if step is None:
                step = store.new_step(self.run.pk, key, rpc_name=workflow_name, retries=0,
                                      from_step_name=from_step)
                try:
                    step.data = normalize(data, what=f"the data of step '{key}'")
                except NotSerializableError as exc:
                    raise WorkflowStepFailedError(key, str(exc)) from None
                self.steps[key] = step
            self.work.begin_attempt(step, save_attempt=True)
            try:
                child = create_child_run(self.run, step, workflow_name, step.data)
            except ChildDepthExceeded as exc:
                error = {**error_dict(exc), "code": exc.code, "fatal": True}
                store.record_failure(step, store.last_attempt(step), error, retrying=False,
                                     work=self.work)
                raise WorkflowStepFailedError(key, str(exc),
                                              error_type=error["type"]) from None
        if child.status == RunStatus.COMPLETED:
            store.record_success(step, store.last_attempt(step), child.output, work=self.work)
            return child.output
        if child.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            message = (child.error or {}).get("message") or f"child run {child.status}"
            error = {**error_dict(RuntimeError(message)), "type": "ChildRunFailed",
                     "child_run": str(child.pk), "fatal": True}
            store.record_failure(step, store.last_attempt(step), error, retrying=False,
                                 work=self.work)
            raise WorkflowStepFailedError(key, f"child run {child.pk} {child.status}: {message}",
                                          error_type="ChildRunFailed")
        # The child is still running or suspended: the step keeps waiting for it.
        self.waiting_on.add(key)
        raise WorkflowPaused(key)

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new code path of the change named ``patch_id``.

        True when the run reaches this point for the first time with the patch deployed
        (it records a marker step, ``patch:<patch_id>``, and every later replay answers
        True from it); False while replaying a run that recorded steps past this point
        without the patch (it keeps the path it took). So ``if wf.patched("x"): new
        else: old`` changes a workflow without breaking its runs in flight. The marker is
        not part of the recorded order: once no live run lacks it, delete the call and
        the old branch.

        Args:
            patch_id: Names the change (unique within the workflow).

        Returns:
            Whether to take the new path.

        Raises:
            WorkflowDefinitionError: ``patch_id`` is not a non-empty printable string.
        """
        check_patch_id(patch_id)
        key = PATCH_PREFIX + patch_id
        if key in self.steps:
            return True
        if self.recorded is not None and self._replayed < len(self.recorded):
            return False
        self.work.ensure_step(self.steps, key, status=StepStatus.SUCCEEDED,
                              data={"patch": patch_id}, from_step_name=self._last_step)
        return True

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the run from inside its body; nothing after this runs."""
        raise WorkflowCancelled(reason)

    def get_state(self) -> dict[str, Any]:
        """The run's state dict, read fresh from the database."""
        return dict(store.load_run(self.run.pk).state or {})

    def set_state(self, name: str, value: Any) -> None:
        """Set one key of the run's state (merged in one UPDATE, safe under concurrency)."""
        check_state_key(name)
        store.merge_state_key(self.run.pk, name, value, self.work)


def _pick(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def _seconds(timeout: float | str | None, key: str) -> float | None:
    if timeout is None:
        return None
    try:
        return parse_duration(timeout, what="timeout") or None
    except ValueError as exc:
        raise WorkflowDefinitionError(f"step '{key}': {exc}") from exc


def wait_timeout(timeout: float | str | None, what: str) -> float | None:
    """A wait's timeout in seconds (None: no timeout)."""
    if timeout is None:
        return None
    try:
        return parse_duration(timeout, what=f"the timeout of {what}")
    except ValueError as exc:
        raise WorkflowDefinitionError(str(exc)) from exc


def _earlier(a: datetime | None, b: datetime | None) -> bool:
    return a is not None and (b is None or a < b)


def _replayed(step: WorkflowStep) -> None:
    """A replayed step: an event of the pass's span when tracing is on."""
    if trace_hooks.current is not None:
        trace_hooks.current.replayed(step)


def _waits(kind: str, step_key: str, until: datetime | None,
           **attributes: trace_hooks.AttributeValue | None) -> None:
    """A sleep or wait the pass stops at: an event of its span when tracing is on."""
    if trace_hooks.current is not None:
        trace_hooks.current.waiting(kind, step_key, until, {
            name: value for name, value in attributes.items() if value is not None})
