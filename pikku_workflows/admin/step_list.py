"""The run page's list of steps: paged, filtered by status (a failed step of a live run
that waits to retry counts as "retrying"), with counts per status and a link to the first
failed step (two queries whatever the run's size, three with a failure)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.paginator import Page, Paginator
from django.http import HttpRequest

from ..models import WorkflowRun, WorkflowStep
from ..status import StepStatus, waits_to_retry
from .graph_svg import step_anchor

STEPS_PER_PAGE = 50
#: The filter of failed steps of a live run that wait to retry (a wake time): they are
#: not failures yet, and the steps table shows them amber.
RETRYING = "retrying"
#: The query parameters of the step list: its page and its status filter.
PAGE_PARAMETER, STATUS_PARAMETER = "steps", "step_status"


def query_string(request: HttpRequest, **changes: str | None) -> str:
    """The page's query string with ``changes`` applied (None removes a parameter)."""
    params = request.GET.copy()
    for name, value in changes.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    return "?" + params.urlencode() if params else "?"


def step_page(request: HttpRequest, run: WorkflowRun) -> tuple[Page[Any], dict[str, Any]]:
    """The page of step ids to show and what the list's header needs.

    Args:
        request: The run page's request (``?steps=``, ``?step_status=``).
        run: The run.

    Returns:
        ``(page of step ids, context)``: the context's ``step_filters`` (one per status
        present: label, count, url, active), ``step_status`` (the filter, or None),
        ``first_failure_url`` and ``steps_previous_url``/``steps_next_url``.
    """
    # Every step's id and status, sorted here: "ORDER BY id LIMIT 50" tempts PostgreSQL
    # into walking the whole primary key of a table of millions of steps.
    rows = sorted(
        (pk, RETRYING if waits_to_retry(status, wake_at, run.status) else status)
        for pk, status, wake_at in WorkflowStep.objects.filter(run=run).order_by()
        .values_list("id", "status", "wake_at"))
    counts = Counter(status for _, status in rows)
    # The statuses the list filters by, as (value, label): the steps' own, then retrying.
    choices = [*((c.value, str(c.label).lower()) for c in StepStatus), (RETRYING, RETRYING)]
    wanted = request.GET.get(STATUS_PARAMETER)
    status = wanted if wanted in dict(choices) else None
    ids = [pk for pk, step_status in rows if status is None or step_status == status]
    page = Paginator(ids, STEPS_PER_PAGE).get_page(request.GET.get(PAGE_PARAMETER))
    filters = [{"label": "all", "count": len(rows), "active": status is None,
                "url": query_string(request, **{STATUS_PARAMETER: None, PAGE_PARAMETER: None})}]
    filters += [{"label": label, "status": value, "count": counts[value],
                 "active": status == value,
                 "url": query_string(request, **{STATUS_PARAMETER: value, PAGE_PARAMETER: None})}
                for value, label in choices if counts[value]]
    first_failure_url = None
    first_failed = next((pk for pk, step_status in rows if step_status == StepStatus.FAILED),
                        None)
    if first_failed is not None:
        name = WorkflowStep.objects.values_list("step_name", flat=True).get(pk=first_failed)
        first_failure_url = query_string(
            request, **{STATUS_PARAMETER: StepStatus.FAILED.value, PAGE_PARAMETER: None}) \
            + "#" + step_anchor(name)
    context = {
        "step_filters": filters, "step_status": status, "first_failure_url": first_failure_url,
        "steps_previous_url": query_string(
            request, **{PAGE_PARAMETER: str(page.previous_page_number())})
        if page.has_previous() else None,
        "steps_next_url": query_string(request, **{PAGE_PARAMETER: str(page.next_page_number())})
        if page.has_next() else None,
    }
    return page, context
