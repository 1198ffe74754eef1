"""Strict query strings: a GET route refuses the parameters it does not take (a 400 naming
them and the ones it takes), where a typo such as ``?stauts=failed`` would otherwise
silently answer the unfiltered list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from rest_framework import status
from rest_framework.request import Request
from rest_framework.settings import api_settings

from .errors import QueryError


def unknown_parameters(unknown: Sequence[str], accepted: Sequence[str]) -> QueryError:
    """The 400 (``UNKNOWN_PARAMETER``) for query parameters a route does not take."""
    names = ", ".join(repr(name[:100]) for name in unknown)
    takes = ", ".join(accepted) if accepted else "none"
    plural = "s" if len(unknown) > 1 else ""
    return QueryError(
        {name[:100]: "Unknown query parameter." for name in unknown},
        f"Unknown query parameter{plural} {names}: this route takes {takes}.",
        "UNKNOWN_PARAMETER")


class StrictQueryParamsMixin:
    """Refuses a GET (or HEAD) whose query string names a parameter the action does not
    take. ``query_parameters`` maps an action to the names it takes (none by default);
    DRF's ``format`` (``URL_FORMAT_OVERRIDE``) is always taken."""

    query_parameters: Mapping[str, Sequence[str]] = {}

    def accepted_query_parameters(self) -> list[str]:
        """The query parameters the current action takes."""
        names = list(self.query_parameters.get(getattr(self, "action", None) or "", ()))
        if api_settings.URL_FORMAT_OVERRIDE:
            names.append(api_settings.URL_FORMAT_OVERRIDE)
        return names

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if request.method in ("GET", "HEAD"):
            accepted = self.accepted_query_parameters()
            unknown = sorted(set(request.query_params) - set(accepted))
            if unknown:
                raise unknown_parameters(unknown, accepted)


def unknown_route(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """A path under the API's prefixes that no route matched: the route it names without
    its trailing slash (``POST runs/{id}/cancel``, which Django's ``APPEND_SLASH`` would
    turn into a redirect and then a 405), else the API's JSON 404 (never Django's HTML
    page), whatever the method."""
    if not request.path_info.endswith("/"):
        try:
            match = resolve(request.path_info + "/", getattr(request, "urlconf", None))
        except Resolver404:
            match = None
        if match is not None and match.func is not unknown_route:
            response: HttpResponse = match.func(request, *match.args, **match.kwargs)
            return response
    return JsonResponse({"detail": "No such route in the workflows API.",
                         "code": "NOT_FOUND"}, status=status.HTTP_404_NOT_FOUND)
