"""``WorkflowContext`` (the ``wf`` of a workflow body) and ``StepContext`` (a step's ``ctx``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..conf import pikku_settings
from ..durations import parse_duration
from ..engine import store
from ..engine.clock import clock
from ..engine.steps import StepCall, invocation_id, run_step
from ..exceptions import (
    WorkflowCancelled,
    WorkflowDefinitionError,
    WorkflowPaused,
    WorkflowStepFailedError,
    WorkflowSuspended,
)
from ..registry import registered_name, registry
from ..status import StepStatus

if TYPE_CHECKING:
    from ..models import WorkflowRun, WorkflowStep

_MISSING: Any = object()


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

    def get_state(self) -> dict[str, Any]:
        """The run's state dict, read fresh from the database."""
        return dict(store.load_run(self.run_id).state or {})

    def set_state(self, name: str, value: Any) -> None:
        """Set one key of the run's state (merged in one UPDATE)."""
        _check_state_key(name)
        store.merge_state_key(self.run_id, name, value)


def _check_state_key(name: Any) -> None:
    if not isinstance(name, str) or not name or '"' in name or "\\" in name:
        raise WorkflowDefinitionError(
            f"state key {name!r} must be a non-empty string without quotes or backslashes"
        )


@dataclass
class WorkflowContext:
    """The ``wf`` argument of a DSL workflow body, rebuilt for every replay pass."""

    run: WorkflowRun
    steps: dict[str, WorkflowStep]
    lease_owner: str
    _ordinals: dict[str, int] = field(default_factory=dict)
    _last_step: str | None = None

    @property
    def run_id(self) -> str:
        return str(self.run.pk)

    @property
    def name(self) -> str:
        return self.run.workflow

    @property
    def owner_id(self) -> Any:
        return self.run.owner_id

    def get_run(self) -> WorkflowRun:
        """The run row, read fresh from the database."""
        return store.load_run(self.run.pk)

    # --- step keys ----------------------------------------------------------------------

    def _mint_key(self, name: Any, *, prefix: str = "") -> str:
        if not isinstance(name, str) or not name:
            raise WorkflowDefinitionError(f"a step name must be a non-empty string, not {name!r}")
        logical = prefix + name
        seen = self._ordinals.get(logical, 0)
        self._ordinals[logical] = seen + 1
        return logical if seen == 0 else f"{logical}#{seen}"

    def step_context(self, key: str, attempt: int) -> StepContext:
        return StepContext(
            run_id=self.run_id, step_name=key, invocation_id=invocation_id(self.run_id, key),
            attempt=attempt, owner_id=self.run.owner_id,
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
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                    or retries < 0):
            raise WorkflowDefinitionError(f"step '{key}': retries must be an int >= 0")
        if retry_delay is not None and retry_delay != "exponential":
            try:
                parse_duration(retry_delay, what="retry_delay")
            except ValueError as exc:
                raise WorkflowDefinitionError(f"step '{key}': {exc}") from exc
        on_error_name = self._function_name(on_error, key) if on_error is not None else None
        if callable(fn_or_name) and registered_name(fn_or_name) is None:
            if data is not _MISSING:
                raise WorkflowDefinitionError(
                    f"step '{key}': {getattr(fn_or_name, '__qualname__', fn_or_name)!r} is not "
                    "a registered function; decorate it with @pw.function, or pass a closure "
                    "without data for an inline step"
                )
            call = StepCall(
                key=key, fn=fn_or_name, rpc_name=None, data=None, takes_data=False,
                retries=_pick(retries, None, pikku_settings.DEFAULT_RETRIES),
                retry_delay=_pick(retry_delay, None, pikku_settings.DEFAULT_RETRY_DELAY),
                on_error=on_error_name, from_step_name=from_step_name,
            )
            return run_step(self, call)
        rpc_name = self._function_name(fn_or_name, key)
        if data is _MISSING:
            data = None
        definition = registry.function(rpc_name)
        if definition is None:
            return self._missing_function(key, rpc_name, data, from_step_name)
        if definition.queued:
            raise WorkflowDefinitionError(
                f"step '{key}': function '{rpc_name}' is queued=True, which needs the RQ "
                "executor (PIKKU_WORKFLOWS = {'EXECUTOR': 'rq'})"
            )
        call = StepCall(
            key=key, fn=definition.fn, rpc_name=rpc_name, data=data,
            takes_context=definition.takes_context, atomic=definition.atomic,
            retries=_pick(retries, definition.retries, pikku_settings.DEFAULT_RETRIES),
            retry_delay=_pick(retry_delay, definition.retry_delay,
                              pikku_settings.DEFAULT_RETRY_DELAY),
            on_error=on_error_name, from_step_name=from_step_name,
        )
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

    def _missing_function(self, key: str, rpc_name: str, data: Any, from_step: str | None) -> Any:
        step = self.steps.get(key)
        if step is not None and step.status == StepStatus.SUCCEEDED:
            return step.result
        store.ensure_step(
            self.run.pk, self.steps, key, rpc_name=rpc_name, data=data,
            status=StepStatus.PENDING, from_step_name=from_step,
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
            return
        if step is None:
            wake_at = clock().after(seconds)
            step = store.ensure_step(
                self.run.pk, self.steps, key, data={"duration": seconds},
                status=StepStatus.SCHEDULED, wake_at=wake_at,
            )
        if step.wake_at is None or step.wake_at <= clock().now():
            store.record_success(step, None, None)
            return
        raise WorkflowPaused(key, wake_at=step.wake_at)

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the run from inside its body; nothing after this runs."""
        raise WorkflowCancelled(reason)

    def get_state(self) -> dict[str, Any]:
        """The run's state dict, read fresh from the database."""
        return dict(store.load_run(self.run.pk).state or {})

    def set_state(self, name: str, value: Any) -> None:
        """Set one key of the run's state (merged in one UPDATE, safe under concurrency)."""
        _check_state_key(name)
        store.merge_state_key(self.run.pk, name, value)


def _pick(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _earlier(a: datetime | None, b: datetime | None) -> bool:
    return a is not None and (b is None or a < b)
