"""Operator actions: resume, cancel, retry, approve, rerun from a step (fork) and delete, on
one run or on every run matching the list's filter, each behind its own permission,
confirmed, logged."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern

from .. import operations, run_audit
from ..engine import approvals, store
from ..engine.summary import StepNames, is_graph_run, step_names
from ..exceptions import WorkflowError, WorkflowInputError
from ..models import WorkflowRun, WorkflowStep
from ..paging import bounded_count
from ..status import RunStatus, SuspensionCode
from ..step_keys import APPROVAL_PREFIX, approval_wait, public_step_name
from ..types import RunId, UserJSON
from .failures import FAILED_ON_INPUT, failed_on_input
from .urls import console_url, object_urls

if TYPE_CHECKING:
    # The mixin always precedes a run ModelAdmin; only the type checker sees this base
    # (Django's ModelAdmin takes no type argument at run time).
    _RunAdminBase = admin.ModelAdmin[WorkflowRun]
else:
    _RunAdminBase = object

#: Runs acted on per transaction when an action applies to every matching run.
BATCH_SIZE = 500
#: The most kept (and rerun) steps a rerun's confirmation page names.
FORK_PREVIEW_STEPS = 100

class Verb(NamedTuple):
    """An operator action: its permission's codename, the run statuses it applies to and
    its past tense for messages."""

    permission: str
    statuses: tuple[str, ...]
    past: str


VERBS: dict[str, Verb] = {
    "resume": Verb("resume_workflowrun", (RunStatus.SUSPENDED,), "resumed"),
    "cancel": Verb("cancel_workflowrun", (RunStatus.RUNNING, RunStatus.SUSPENDED), "cancelled"),
    "retry": Verb("retry_workflowrun", (RunStatus.FAILED,), "retried"),
    "approve": Verb("approve_workflowrun", (RunStatus.SUSPENDED, RunStatus.RUNNING), "answered"),
    # A suspended run only with VERSION_CONFLICT (WorkflowRun.is_forkable).
    "fork": Verb("fork_workflowrun", (*RunStatus.terminal(), RunStatus.SUSPENDED), "rerun"),
    "delete": Verb("delete_workflowrun", tuple(RunStatus.terminal()), "deleted"),
}
#: What a verb's button and confirmations say, when not the verb itself.
LABELS = {"approve": "Approve or reject", "fork": "Rerun from a step"}


class JSONField(forms.CharField):
    """A textarea whose content must be JSON (empty means null)."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 60})

    def to_python(self, value: str | None) -> UserJSON:
        text = (value or "").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        except RecursionError:
            raise forms.ValidationError("Not valid JSON: nested too deeply.") from None


class ResumeForm(forms.Form):
    payload = JSONField(required=False, label="data",
                        help_text="What the wf.suspend() returns (JSON).")


class CancelForm(forms.Form):
    reason = forms.CharField(required=False, max_length=1000)


class ConfirmForm(forms.Form):
    pass


class ForkForm(forms.Form):
    from_step = forms.CharField(required=False, widget=forms.HiddenInput)
    input = JSONField(required=False, label="input",
                      help_text="The fork's input (JSON); as it is, the run's own.")
    reason = forms.CharField(required=False, max_length=1000,
                             widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Why (kept on the new run and in the audit).")


_FORM_FIELDS = {"BooleanField": forms.BooleanField, "IntegerField": forms.IntegerField,
                "FloatField": forms.FloatField, "CharField": forms.CharField,
                "EmailField": forms.EmailField}


def approval_form(gate: WorkflowStep | None) -> type[forms.Form]:
    """A form from the gate's serializer when it names one, else a JSON decision."""
    fields: dict[str, forms.Field] = {}
    serializer = approvals.gate_serializer(gate.data if gate else None)
    if serializer is not None:
        for name, field in serializer.fields.items():
            if name == "approved" and type(field).__name__ == "BooleanField":
                continue  # the Approve and Reject buttons decide it
            kind = _FORM_FIELDS.get(type(field).__name__)
            choices = getattr(field, "choices", None)
            if choices:
                fields[name] = forms.ChoiceField(choices=list(choices.items()),
                                                 required=field.required)
            elif kind is not None:
                fields[name] = kind(required=field.required and kind is not forms.BooleanField)
            else:
                fields[name] = JSONField(required=field.required)
    else:
        fields["decision"] = JSONField(
            required=False,
            help_text='Optional: more of the decision as a JSON object, e.g. {"note": "ok"}. '
                      'The button adds "approved": true or false.')
    return type("ApprovalForm", (forms.Form,), fields)


def _gate(run: WorkflowRun) -> WorkflowStep | None:
    step = approval_wait(run.error)
    if step is None:
        return None
    return WorkflowStep.objects.filter(run=run, step_name=step).first()


def _waits_for_approval(run: WorkflowRun) -> bool:
    """Whether the run is suspended at an approval gate: approve or reject, never resume."""
    return run.status == RunStatus.SUSPENDED and approval_wait(run.error) is not None


#: Suspended runs waiting at an approval gate, as ``approval_wait`` says (either code; a
#: VERSION_CONFLICT at a gate's key is not one); within the partial index
#: ``pikku_run_waiting_for_approval``, whose condition this is.
AT_APPROVAL_GATE = Q(status=RunStatus.SUSPENDED, error__step__startswith=APPROVAL_PREFIX,
                     error__code__in=[SuspensionCode.WAITING_FOR_APPROVAL,
                                      SuspensionCode.WORKFLOW_SUSPENDED])
#: Its negation, true also for an error without a ``step`` or ``code`` (a workflow not
#: deployed in the process that passed the run): SQL's NOT of an unknown would leave
#: those out.
NOT_AT_APPROVAL_GATE = (~AT_APPROVAL_GATE | Q(error__step__isnull=True)
                        | Q(error__code__isnull=True))


#: The ``error.code`` of a run waiting for an event (``wf.wait_for_event``).
WAITING_FOR_EVENT = str(SuspensionCode.WAITING_FOR_EVENT.value)
#: The ``error.code`` of a run waiting for a message (``wf.recv``).
WAITING_FOR_MESSAGE = str(SuspensionCode.WAITING_FOR_MESSAGE.value)
#: Both: the waits that are ended by sending something (or a cancel), never a resume.
WAIT_CODES = (WAITING_FOR_EVENT, WAITING_FOR_MESSAGE)
#: Suspended runs waiting for an event, or for a message.
WAITING_FOR = {
    "event": Q(status=RunStatus.SUSPENDED, error__code=WAITING_FOR_EVENT),
    "message": Q(status=RunStatus.SUSPENDED, error__code=WAITING_FOR_MESSAGE),
}
#: Runs that wait for neither (true also for an error without a ``code``: SQL's NOT of
#: an unknown would leave those out).
NOT_WAITING_TO_RECEIVE = (~Q(error__code__in=WAIT_CODES) | Q(error__code__isnull=True))


def applies_to(verb: str) -> Q:
    """The runs ``verb`` applies to, as a condition (DESIGN 1.1: a run waiting for an
    approval is answered, not resumed, one waiting for an event or a message is sent it;
    a run that failed on its input is not retried)."""
    condition = Q(status__in=VERBS[verb].statuses)
    if verb == "resume":
        return condition & NOT_AT_APPROVAL_GATE & NOT_WAITING_TO_RECEIVE
    if verb == "retry":
        return condition & ~FAILED_ON_INPUT
    if verb == "fork":
        # The bulk rerun starts at each run's first failed step.
        return Q(status=RunStatus.FAILED)
    return condition


class RunActionsMixin(_RunAdminBase):
    """Object tools and list actions of the run admins (put first in the bases)."""

    actions = ["cancel_runs", "retry_runs", "resume_runs", "fork_runs", "delete_runs"]

    def _allowed(self, request: HttpRequest, verb: str) -> bool:
        return bool(request.user.has_perm(f"pikku_workflows.{VERBS[verb].permission}"))

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # Only through the confirmed action, and only finished runs.
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        for verb in ("cancel", "retry", "resume", "fork", "delete"):
            if not self._allowed(request, verb):
                actions.pop(f"{verb}_runs", None)
        return actions

    def get_urls(self) -> list[URLPattern]:
        return object_urls(self, {verb: self._object_view(verb) for verb in VERBS}) \
            + super().get_urls()

    def get_action_context(self, request: HttpRequest, run: WorkflowRun) -> dict[str, object]:
        """The object tools the run page shows: allowed and applicable to its status."""
        tools = []
        for verb, action in VERBS.items():
            applies = run.status in action.statuses
            if verb == "approve":
                applies = _waits_for_approval(run)
            elif verb == "resume":
                applies = applies and not _waits_for_approval(run) and not (
                    isinstance(run.error, dict) and run.error.get("code") in WAIT_CODES)
            elif verb == "retry" and failed_on_input(run):
                applies = False  # the same input would fail the same way
            elif verb == "fork":
                applies = run.is_forkable
            if applies and self._allowed(request, verb):
                label = LABELS.get(verb, verb.capitalize())
                tools.append({"verb": verb, "label": label, "url": console_url(
                    self.admin_site.name, f"workflowrun_{verb}", run.pk)})
        return {"action_tools": tools}

    # --- one run ------------------------------------------------------------------------

    def _object_view(self, verb: str) -> Callable[..., HttpResponse]:
        def view(request: HttpRequest, object_id: str) -> HttpResponse:
            return self.act_on_run(request, object_id, verb)
        return view

    def act_on_run(self, request: HttpRequest, object_id: str, verb: str) -> HttpResponse:
        if not self._allowed(request, verb):
            raise PermissionDenied
        run = WorkflowRun.objects.filter(pk=object_id).first() if is_uuid(object_id) else None
        if run is None:
            messages.error(request, f"No run has the id {object_id!r}.")
            return HttpResponseRedirect(console_url(self.admin_site.name, "workflowrun_changelist"))
        page = console_url(self.admin_site.name, "workflowrun_change", run.pk)
        if verb == "fork":
            return self.fork_page(request, run, page)
        gate = _gate(run) if verb == "approve" else None
        forms_by_verb: dict[str, type[forms.Form]] = {
            "resume": ResumeForm, "cancel": CancelForm, "approve": approval_form(gate)}
        form_class = forms_by_verb.get(verb, ConfirmForm)
        form = form_class(request.POST if request.method == "POST" else None)
        for field in list(form.fields.values())[:1]:
            field.widget.attrs["autofocus"] = True  # keyboard users type at once
        if request.method == "POST" and form.is_valid():
            try:
                message = self._perform(request, run, verb, form.cleaned_data, gate)
            except WorkflowError as exc:
                detail = getattr(exc, "errors", None)
                messages.error(request, f"{verb.capitalize()} refused: {exc}"
                               + (f" {detail}" if isinstance(exc, WorkflowInputError) and detail
                                  else ""))
                return HttpResponseRedirect(page)
            messages.success(request, message)
            if verb == "delete":
                return HttpResponseRedirect(
                    console_url(self.admin_site.name, "workflowrun_changelist"))
            return HttpResponseRedirect(page)
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "run": run,
            "verb": verb, "form": form, "gate": gate, "title": f"{verb.capitalize()} {run}",
            "run_url": page,
        }
        return TemplateResponse(request, "admin/pikku_workflows/actions/confirm.html", context)

    def _perform(self, request: HttpRequest, run: WorkflowRun, verb: str,
                 data: dict[str, UserJSON],
                 gate: WorkflowStep | None) -> str:
        if verb == "resume":
            operations.resume_run(run.pk, data.get("payload"))
            run_audit.record(request.user, run.pk, "resume", via="console",
                             reason=run_audit.as_reason(data.get("payload")))
        elif verb == "cancel":
            reason = data.get("reason") or "cancelled from the console"
            operations.cancel_run(run.pk, reason)
            run_audit.record(request.user, run.pk, "cancel", via="console",
                             reason=str(reason))
        elif verb == "retry":
            operations.retry_run(run.pk)
            run_audit.record(request.user, run.pk, "retry", via="console")
        elif verb == "approve":
            if gate is None:
                raise WorkflowError(f"run {run.pk} waits for no approval")
            reason = gate.step_name[len(APPROVAL_PREFIX):]
            # Fields left empty are left out: the gate's serializer applies its defaults.
            decision = data["decision"] if set(data) == {"decision"} else {
                key: value for key, value in data.items() if value not in ("", None)}
            # The button says yes or no: "approved" in a decision object (an empty box is
            # one); a JSON value that is not an object is sent as typed on Approve.
            approved = "reject" not in request.POST
            if decision is None or isinstance(decision, dict) or not approved:
                decision = {**(decision if isinstance(decision, dict) else {}),
                            "approved": approved}
            operations.approve_step(run.pk, reason, decision, user=request.user)
            run_audit.record(request.user, run.pk, "approve" if approved else "reject",
                             via="console", gate=reason, reason=run_audit.as_reason(decision))
            return f"Answered the approval '{reason}' of run {run.pk}: {json.dumps(decision)}"
        elif verb == "delete":
            if not run.is_terminal:
                raise WorkflowError(f"run {run.pk} is {run.status}: cancel it first")
            run_id = run.pk
            store.delete_runs([run_id])
            run_audit.record(request.user, run_id, "delete", via="console")
            return f"Run {run_id} deleted."
        return f"Run {run.pk} {VERBS[verb].past}."

    def fork_page(self, request: HttpRequest, run: WorkflowRun, page: str) -> HttpResponse:
        """Rerun from a step: what the fork keeps and reruns, a new input, a reason."""
        data = request.POST if request.method == "POST" else None
        from_step = (data or request.GET).get("from_step") or None
        try:
            plan = operations.fork_preview(run.pk, from_step)
        except WorkflowError as exc:
            messages.error(request, f"Rerun refused: {exc}")
            return HttpResponseRedirect(page)
        form = ForkForm(data, initial={"from_step": from_step or "",
                                       "input": json.dumps(run.input, indent=2)})
        if form.is_valid():
            given = form.cleaned_data["input"]
            try:
                with operations.started_from({"type": "admin"}):
                    fork = operations.fork_run(
                        run.pk, from_step=from_step, reason=form.cleaned_data["reason"],
                        input=None if given == run.input else given, user=request.user)
            except WorkflowError as exc:
                detail = getattr(exc, "errors", None)
                messages.error(request, f"Rerun refused: {exc}"
                               + (f" {detail}" if isinstance(exc, WorkflowInputError) and detail
                                  else ""))
            else:
                run_audit.record(request.user, run.pk, "rerun", via="console",
                                 reason=run_audit.fork_reason(fork))
                messages.success(request, f"Run {run.pk} rerun as run {fork.pk} "
                                          f"({fork.status}).")
                return HttpResponseRedirect(
                    console_url(self.admin_site.name, "workflowrun_change", fork.pk))
        graph = is_graph_run(run.workflow, run.graph_hash)
        kept, rerun = plan.kept[:FORK_PREVIEW_STEPS], plan.rerun[:FORK_PREVIEW_STEPS]
        rows = {step.step_name: step for step in WorkflowStep.objects.filter(
            run=run, step_name__in=kept + rerun).only(
            "step_name", "rpc_name", "child_run_id", "data")}

        def names(key: str) -> StepNames:
            row = rows[key]
            return step_names(key, rpc_name=row.rpc_name, child_run=row.child_run_id,
                              data=row.data, graph=graph)

        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "run": run,
            "form": form, "run_url": page, "title": f"Rerun {run} from a step",
            "cut": public_step_name(plan.cut) if plan.cut else "",
            "asked": public_step_name(plan.asked) if plan.asked else "",
            "graph": plan.graph, "moved": plan.moved,
            "kept": [names(key) for key in kept], "kept_count": len(plan.kept),
            "kept_more": len(plan.kept) - len(kept),
            "rerun": [names(key) for key in rerun], "rerun_count": len(plan.rerun),
            "rerun_more": len(plan.rerun) - len(rerun),
        }
        return TemplateResponse(request, "admin/pikku_workflows/actions/fork.html", context)

    # --- every matching run ---------------------------------------------------------------

    def _bulk(self, request: HttpRequest, queryset: QuerySet[WorkflowRun], verb: str
              ) -> HttpResponse | None:
        if not self._allowed(request, verb):
            raise PermissionDenied
        applicable = queryset.filter(applies_to(verb))
        if "confirm" not in request.POST:
            count, exact = bounded_count(applicable)
            context = {
                **self.admin_site.each_context(request), "opts": self.opts, "verb": verb,
                "count": count, "count_is_exact": exact, "past": VERBS[verb].past,
                "skipped": bounded_count(queryset.exclude(applies_to(verb)))[0],
                "sample": list(applicable.order_by("-created_at")[:10]),
                "action": request.POST.get("action"),
                "select_across": request.POST.get("select_across", "0"),
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "title": f"{verb.capitalize()} runs",
                "fork": verb == "fork",
            }
            return TemplateResponse(request, "admin/pikku_workflows/actions/bulk_confirm.html",
                                    context)
        done = failed = 0
        last = None
        while True:
            # Batches by primary key: never every matching row in memory at once.
            batch = applicable.order_by("pk")
            if last is not None:
                batch = batch.filter(pk__gt=last)
            ids = list(batch.values_list("pk", flat=True)[:BATCH_SIZE])
            if not ids:
                break
            last = ids[-1]
            for run_id in ids:
                try:
                    self._bulk_one(request, run_id, verb)
                    done += 1
                except WorkflowError:
                    failed += 1
        message = f"{done} run(s) {VERBS[verb].past}"
        if failed and verb == "fork":
            message += (f", {failed} refused (the current code no longer replays them, or "
                        "their status changed meanwhile)")
        elif failed:
            message += (f", {failed} refused (their status changed meanwhile, or a run "
                    f"to delete has a live child run)")
        self.message_user(request, message + ".", messages.SUCCESS)
        return None

    def _bulk_one(self, request: HttpRequest, run_id: RunId, verb: str) -> None:
        if verb == "cancel":
            operations.cancel_run(run_id, "cancelled from a list action")
            run_audit.record(request.user, run_id, "cancel", via="console",
                             reason="cancelled from a list action")
        elif verb == "retry":
            operations.retry_run(run_id)
            run_audit.record(request.user, run_id, "retry", via="console")
        elif verb == "resume":
            operations.resume_run(run_id)
            run_audit.record(request.user, run_id, "resume", via="console")
        elif verb == "fork":
            with operations.started_from({"type": "admin"}):
                fork = operations.fork_run(run_id, reason="rerun from a list action",
                                           user=request.user)
            run_audit.record(request.user, run_id, "rerun", via="console",
                             reason=run_audit.fork_reason(fork))
        else:
            store.delete_runs([run_id])
            run_audit.record(request.user, run_id, "delete", via="console")

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                    ) -> HttpResponse | None:
        return self._bulk(request, queryset, "cancel")

    @admin.action(description="Retry the selected failed runs")
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                    ) -> HttpResponse | None:
        return self._bulk(request, queryset, "retry")

    @admin.action(description="Resume the selected suspended runs")
    def resume_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                    ) -> HttpResponse | None:
        return self._bulk(request, queryset, "resume")

    @admin.action(description="Rerun the selected failed runs from their first failed step")
    def fork_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                  ) -> HttpResponse | None:
        return self._bulk(request, queryset, "fork")

    @admin.action(description="Delete the selected finished runs")
    def delete_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]
                    ) -> HttpResponse | None:
        return self._bulk(request, queryset, "delete")


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(str(text))
    except ValueError:
        return False
    return True
