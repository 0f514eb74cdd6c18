"""Every failure of the agent API as one problem+json answer (RFC 9457), never HTML, never a trace.

Maps django-ninja's and pydantic's validation errors, Django's body-size refusal and anything
unexpected to the problem codes of operations.api.problems, and reads request bodies strictly.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import pydantic
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from operations.api.parsing import parse_json_object, require_json_content_type
from operations.api.problems import PROBLEM_CONTENT_TYPE, ApiProblem, FieldError, not_found, problem_response

logger = logging.getLogger("operations.api.routes")


def problem(request: HttpRequest, exc: ApiProblem) -> HttpResponse:
    return problem_response(exc, instance=request.path[:200])


def no_such_resource(request: HttpRequest, exc: Exception | None = None) -> HttpResponse:
    return problem(request, ApiProblem("not_found", "No such API resource; see /api/v1/openapi.json."))


class SchemaProblem(Exception):
    """A request body failed its pydantic model; carries the errors located under /body."""

    def __init__(self, errors: list[dict]) -> None:
        super().__init__("schema")
        self.errors = errors


def json_body(request: HttpRequest, *, required: bool) -> dict[str, object] | None:
    """The request's JSON object, read strictly; None for an empty optional body."""
    body = request.body
    if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        # Django checks Content-Length; a chunked body without one is measured here.
        raise RequestDataTooBig
    if not body:
        if required:
            raise ApiProblem("invalid_json", "Send a JSON object body (Content-Type: application/json).")
        return None
    require_json_content_type(request)
    return parse_json_object(body)


def validate(model: type[pydantic.BaseModel], data: dict[str, object] | None) -> Any:
    try:
        return model.model_validate(data or {})
    except pydantic.ValidationError as exc:
        raise SchemaProblem([{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]) from None


def _pointer(loc: tuple) -> str:
    return "/" + "/".join(str(part) for part in loc)


def validation_problem(request: HttpRequest, errors: list[dict]) -> HttpResponse:
    """Map pydantic/ninja validation errors to the API's problem codes."""
    field_errors: list[FieldError] = []
    top = "invalid_field"
    for error in errors:
        loc = tuple(error.get("loc", ()))
        kind = str(error.get("type", ""))
        if loc[:2] == ("path", "operation_id"):
            # Not an id this server makes: no such operation, like any unknown id.
            match = getattr(request, "resolver_match", None)
            operation_id = (match and match.kwargs or {}).get("operation_id", "")
            return problem(request, not_found(str(operation_id)))
        if loc[:2] == ("query", "timeout_s"):
            top = "invalid_timeout"
            code = "pattern"
        elif kind == "extra_forbidden":
            code = "unknown_field"
        elif kind == "missing":
            code = "missing_field"
        else:
            code = "invalid_type" if kind.endswith("_type") else kind or "invalid"
        field_errors.append(FieldError(_pointer(loc), code, str(error.get("msg", ""))[:200]))
    codes = {error.code for error in field_errors}
    if top != "invalid_timeout":
        if "unknown_field" in codes:
            top = "unknown_field"
        elif codes == {"missing_field"}:
            top = "missing_field"
    names = ", ".join(error.pointer for error in field_errors[:5])
    details = {
        "unknown_field": f"Remove the field(s) this call does not accept: {names}.",
        "missing_field": f"Add the required field(s): {names}.",
        "invalid_timeout": "timeout_s must be a whole number of seconds in ASCII digits (0-50; more is lowered to 50).",
        "invalid_field": f"Fix the field(s) {names}: "
        + "; ".join(f"{e.pointer}: {e.detail}" for e in field_errors[:3]),
    }
    return problem(request, ApiProblem(top, details[top], errors=field_errors[:20]))


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ApiProblem):
        return problem(request, exc.__cause__)
    code = {400: "invalid_json", 401: "unauthenticated", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "invalid_field"
    )
    return problem(request, ApiProblem(code, str(exc)[:200], status=exc.status_code))


def _on_unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
    response = problem(
        request,
        ApiProblem(
            "unauthenticated",
            "Send Authorization: Bearer <token> with a live token (manage.py create_agent_token NAME makes one).",
        ),
    )
    response["WWW-Authenticate"] = 'Bearer realm="pollerdash"'
    return response


def _on_too_big(request: HttpRequest, exc: Exception) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return problem(request, ApiProblem("body_too_large", f"Request bodies are limited to {limit} bytes."))


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    if isinstance(exc, DatabaseError):
        # The database is restarting or unreachable: a retry in a few seconds is the right move.
        logger.warning("agent API: database unavailable on %s %s (%s)", request.method, request.path[:200], exc)
        return problem(
            request,
            ApiProblem(
                "unavailable",
                "The database is not reachable right now; retry in a few seconds.",
                headers={"Retry-After": "5"},
            ),
        )
    logger.exception("agent API: unexpected error on %s %s", request.method, request.path[:200])
    return problem(request, ApiProblem("internal", "Something went wrong on our side; retry shortly."))


def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    """For failures outside django-ninja's handlers (the threadless handler's own steps)."""
    return _on_unexpected(request, exc)


def install(api: NinjaAPI) -> None:
    """Register the handlers; django-ninja picks the most specific class of each exception."""
    # Each handler takes its own class (django-ninja's annotation asks for one taking the class or the type).
    handlers: list[tuple[type[Exception], Callable[..., HttpResponse]]] = [
        (Exception, _on_unexpected),
        (ApiProblem, problem),
        (SchemaProblem, lambda request, exc: validation_problem(request, exc.errors)),
        (ValidationError, lambda request, exc: validation_problem(request, list(exc.errors))),
        (HttpError, _on_http_error),
        (AuthenticationError, _on_unauthenticated),
        (RequestDataTooBig, _on_too_big),
        (Http404, no_such_resource),
    ]
    for exc_class, handler in handlers:
        api.add_exception_handler(exc_class, handler)


def json_answers_only(view: Callable) -> Callable:
    """Wrap an API URL's view so Django's and django-ninja's plain-text 404/405 become problems."""

    def fix(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        content_type = response.get("Content-Type", "")
        if response.status_code < 400 or content_type.startswith(("application/json", PROBLEM_CONTENT_TYPE)):
            return response
        if response.status_code == 405:
            allowed = response.get("Allow", "")
            detail = f"{request.method} is not allowed here; use {allowed or 'another method'}."
            fixed = problem(request, ApiProblem("method_not_allowed", detail))
            fixed["Allow"] = allowed
            return fixed
        return no_such_resource(request)

    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                return fix(request, await view(request, *args, **kwargs))
            except Http404:
                return no_such_resource(request)

        return async_wrapped

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return fix(request, view(request, *args, **kwargs))
        except Http404:
            return no_such_resource(request)

    # Django's own marker on a view function (read by CsrfViewMiddleware).
    wrapped.csrf_exempt = True  # type: ignore[attr-defined]
    return wrapped
