"""Control characters in a request's address refused before any view or query sees them.

A NUL byte (`%00`) in a path segment or a query parameter reached the database as part of a lookup
(`/operations/a%00b/`, `?q=%00`) and PostgreSQL refuses NUL in text ("A string literal cannot contain
NUL"): a 500, where SQLite said nothing. Other control characters (C0, DEL) have no place in an
address either. This middleware, first in MIDDLEWARE, answers:

- a path holding one: 404, as for any address that names nothing;
- a query parameter (name or value) holding one: 400, naming the parameter;
- a form field (a urlencoded or multipart POST outside the API) holding one other than a tab or a
  line break: 400, naming it;
- a cookie holding one: the cookie is ignored (a session or CSRF cookie with NUL would reach a query).

The agent API (/api/) gets RFC 9457 problem JSON (`not_found`, `invalid_field`), the rest a plain
text page. Pure checks, no database.
"""

from __future__ import annotations

import re

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Text typed into a form may hold tabs and line breaks; nothing else below a space.
FORM_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
API_PREFIX = "/api/"
FORMS = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _answer(request: HttpRequest, *, status: int, code: str, detail: str) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        from operations.api.problems import ApiProblem, problem_response

        return problem_response(ApiProblem(code, detail), instance=request.path[:200])
    response = HttpResponse(detail + "\n", status=status, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-store"
    return response


def refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer to a request whose address holds a control character, or None."""
    if CONTROL.search(request.path):
        return _answer(
            request, status=404, code="not_found", detail="Not found: the address holds a control character."
        )
    for name, values in request.GET.lists():
        if CONTROL.search(name) or any(CONTROL.search(value) for value in values):
            shown = CONTROL.sub("?", name)[:40]
            return _answer(
                request,
                status=400,
                code="invalid_field",
                detail=f"The query parameter {shown!r} holds a control character (such as NUL); remove it.",
            )
    if request.method == "POST" and request.content_type in FORMS and not request.path.startswith(API_PREFIX):
        for name, values in request.POST.lists():
            if FORM_CONTROL.search(name) or any(FORM_CONTROL.search(value) for value in values):
                shown = CONTROL.sub("?", name)[:40]
                return _answer(
                    request,
                    status=400,
                    code="invalid_field",
                    detail=f"The field {shown!r} holds a control character (such as NUL); remove it.",
                )
    return None


class ControlCharactersMiddleware(MiddlewareMixin):
    def process_request(self, request: HttpRequest) -> HttpResponseBase | None:
        for name in [name for name, value in request.COOKIES.items() if CONTROL.search(value) or CONTROL.search(name)]:
            del request.COOKIES[name]
        return refusal(request)
