"""A run's audit: who started, resumed, cancelled, retried, approved or deleted it, when, why.

The console and the REST API record each operation an operator does on a run with
:func:`record`, as one entry of Django's admin log (``LogEntry``); :func:`run_audit` reads
them back for a run page, merged with the decisions its approval gates recorded (made by
code, or before this log existed) and with what the run row itself says (its start, a
cancel by code), in time order. The engine never writes here: it records no operator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connections

from .models import WorkflowRun, WorkflowStep
from .status import RunStatus, StepStatus
from .step_keys import APPROVAL_PREFIX, public_step_name
from .types import RunId

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry

#: action -> what the audit says
ACTIONS = {"start": "started", "resume": "resumed", "cancel": "cancelled", "retry": "retried",
           "approve": "approved", "reject": "rejected", "delete": "deleted", "rerun": "rerun",
           "send_event": "sent the event", "send_message": "sent a message"}
#: Where an operation came from, as the log says it.
SOURCES = ("console", "API")
#: A run's ``wire`` type (how it was started) -> the audit's ``via``.
WIRES = {"http": "API", "admin": "console", "python": "code", "cli": "command",
         "internal": "parent run"}
#: The index that finds a run's entries in Django's admin log, which has none on
#: ``object_id`` (``ensure_admin_log_index``).
ADMIN_LOG_INDEX = "pikku_admin_log_object"
#: The most of a reason (or resume data) an entry keeps.
MAX_REASON = 500

_MESSAGE = re.compile(
    r'^(?P<what>' + "|".join(ACTIONS.values()) + r')'
    r'(?: (?P<gate>"(?:[^"\\]|\\.)*"))?'
    r' via the (?P<via>' + "|".join(SOURCES) + r')'
    r'(?:: (?P<reason>.*))?$', re.S)


@dataclass(frozen=True)
class AuditEntry:
    """One line of a run's audit.

    Attributes:
        at: When.
        who: A username, or ``""`` when no user did it (code, a schedule, the engine).
        what: ``started``, ``resumed``, ``cancelled``, ``retried``, ``approved``,
            ``rejected``, ``deleted``, ``rerun``, ``expired``, or a log message of
            another form, as written.
        via: ``console``, ``API``, ``code`` or ``""`` (unknown).
        gate: The approval gate's reason, for approvals.
        reason: The reason given (a cancel's), the data given (a resume's), the note or
            decision (an approval's).
    """

    at: datetime
    who: str
    what: str
    via: str = ""
    gate: str = ""
    reason: str = ""


def record(user: Any, run_id: RunId, action: str, *, via: str, reason: str = "",
           gate: str = "") -> None:
    """Log an operator's operation on a run in Django's admin log.

    Args:
        user: Who did it; nothing is logged for an anonymous user or None (the log
            needs a user: code and schedules show in the run row instead).
        run_id: The run.
        action: A key of ``ACTIONS``.
        via: ``"console"`` or ``"API"``.
        reason: Why (a cancel's reason), or what was given (resume data, a decision).
        gate: The approval gate's reason, for ``approve`` and ``reject``.
    """
    if user is None or getattr(user, "is_anonymous", True) or user.pk is None or \
            not apps.is_installed("django.contrib.admin"):
        return
    from django.contrib.admin.models import CHANGE, DELETION, LogEntry
    if action not in ACTIONS or via not in SOURCES:
        raise ValueError(f"unknown audit action {action!r} or source {via!r}")
    message = ACTIONS[action]
    if gate:
        message += " " + json.dumps(gate)
    message += f" via the {via}"
    if reason:
        message += ": " + reason[:MAX_REASON]
    LogEntry.objects.log_actions(
        user_id=user.pk, queryset=[WorkflowRun(pk=run_id)],
        action_flag=DELETION if action == "delete" else CHANGE,
        change_message=message, single_object=True)


def as_reason(value: Any) -> str:
    """Data given with an operation (resume data, a decision) as an entry's reason."""
    if value is None or value == "":
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def fork_reason(fork: WorkflowRun) -> str:
    """The reason of a ``rerun`` entry on a fork's source: the fork, its step, why."""
    text = f"as run {fork.pk}"
    if fork.fork_step:
        text += f" from step {public_step_name(fork.fork_step)!r}"
    return text + (f": {fork.fork_reason}" if fork.fork_reason else "")


def run_audit(run: WorkflowRun) -> list[AuditEntry]:
    """Everything done to ``run`` by whom, oldest first (three queries).

    Args:
        run: The run (its ``owner`` loaded with it saves a query).

    Returns:
        The entries, in time order.
    """
    entries: list[AuditEntry] = []
    logged: Iterable[LogEntry] = ()
    if apps.is_installed("django.contrib.admin"):
        from django.contrib.admin.models import LogEntry

        logged = LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(WorkflowRun,
                                                           for_concrete_model=False),
            object_id=str(run.pk)).select_related("user").order_by("action_time", "pk")
    for entry in logged:
        found = _from_log(entry)
        if found.what == ACTIONS["start"]:
            # Logged once the start returned (the API's run/ waits for the end).
            found = AuditEntry(at=run.created_at, who=found.who, what=found.what,
                               via=found.via, reason=found.reason)
        entries.append(found)
    if not any(e.what == ACTIONS["start"] for e in entries):
        # The run row says who started it (its owner) and through what (its wire): the
        # REST API and code log no start of their own, a row per run started.
        owner = run.owner.get_username() if run.owner_id and run.owner else ""
        wire = str((run.wire or {}).get("type", ""))
        reason = f"child of run {run.parent_run_id}" if run.parent_run_id else ""
        if run.forked_from_id or run.fork_kept_through is not None or run.fork_step:
            # A fork: started by whoever asked for it (its owner is its source's).
            owner = run.forked_by.get_username() if run.forked_by_id and run.forked_by \
                else ""
            reason = (f"rerun of run {run.forked_from_id or '(deleted)'}"
                      + (f" from step {public_step_name(run.fork_step)!r}"
                         if run.fork_step else "")
                      + (f": {run.fork_reason}" if run.fork_reason else ""))
        entries.insert(0, AuditEntry(
            at=run.created_at, who=owner, what=ACTIONS["start"],
            via=WIRES.get(wire, wire), reason=reason))
    entries += _gate_decisions(run, entries)
    if run.status == RunStatus.CANCELLED and run.finished_at is not None and \
            not any(e.what == ACTIONS["cancel"] for e in entries):
        # Cancelled by code (pw.cancel_run, wf.cancel): the run row keeps the reason.
        entries.append(AuditEntry(at=run.finished_at, who="", what=ACTIONS["cancel"],
                                  via="code", reason=str((run.error or {}).get("message", ""))))
    return sorted(entries, key=lambda e: e.at)


def _from_log(entry: LogEntry) -> AuditEntry:
    who = entry.user.get_username() if entry.user else ""
    match = _MESSAGE.match(entry.change_message or "")
    if match is None:
        # Written before this log's format (or by other code): shown as written.
        text = entry.get_change_message() or ("deleted" if entry.is_deletion() else "changed")
        return AuditEntry(at=entry.action_time, who=who, what=text)
    gate = json.loads(match["gate"]) if match["gate"] else ""
    return AuditEntry(at=entry.action_time, who=who, what=match["what"], via=match["via"],
                      gate=gate, reason=match["reason"] or "")


def _gate_decisions(run: WorkflowRun, logged: list[AuditEntry]) -> list[AuditEntry]:
    """The decisions the run's gates recorded that no logged entry already shows."""
    gates = list(WorkflowStep.objects.filter(
        run=run, step_name__startswith=APPROVAL_PREFIX, status=StepStatus.SUCCEEDED
    ).values_list("step_name", "result", "updated_at"))
    deciders: set[int | str] = {row["decided_by"] for _, row, _ in gates
                                if isinstance(row, dict) and row.get("decided_by") is not None}
    names = dict(get_user_model().objects.filter(pk__in=deciders).values_list(
        "pk", get_user_model().USERNAME_FIELD)) if deciders else {}
    shown = {(e.gate.split("#", 1)[0], e.who) for e in logged
             if e.what in (ACTIONS["approve"], ACTIONS["reject"])}
    found = []
    for key, result, updated_at in gates:
        outcome = result if isinstance(result, dict) else {}
        gate = key[len(APPROVAL_PREFIX):].split("#", 1)[0]
        if outcome.get("status") == "expired":
            found.append(AuditEntry(at=updated_at, who="", what="expired", gate=gate))
            continue
        if outcome.get("status") != "decided":
            continue
        who = str(names.get(outcome.get("decided_by"), ""))
        if (gate, who) in shown:
            continue
        data = outcome.get("data")
        approved = not (isinstance(data, dict) and data.get("approved") is False)
        note = data.get("note") if isinstance(data, dict) else None
        at = _parse_time(outcome.get("decided_at")) or updated_at
        found.append(AuditEntry(
            at=at, who=who, what=ACTIONS["approve" if approved else "reject"],
            via="" if who else "code", gate=gate,
            reason=str(note) if note else as_reason(data)))
    return found


def _parse_time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def ensure_admin_log_index(using: str = "default", **kwargs: Any) -> None:
    """Index Django's admin log on ``(object_id, content_type_id)``, once (a
    ``post_migrate`` receiver): without it, a run page's audit reads every log entry of
    every run, a million after a bulk action on a million runs. PostgreSQL and SQLite;
    a no-op where the admin log's table does not exist (no ``django.contrib.admin``).

    Args:
        using: The database alias ``migrate`` ran on.
        **kwargs: The rest of ``post_migrate``'s arguments.
    """
    from django.contrib.admin.models import LogEntry

    connection = connections[using]
    table = LogEntry._meta.db_table
    if connection.vendor not in ("postgresql", "sqlite") or \
            table not in connection.introspection.table_names():
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {quote(ADMIN_LOG_INDEX)} ON "
                       f"{quote(table)} ({quote('object_id')}, {quote('content_type_id')})")
