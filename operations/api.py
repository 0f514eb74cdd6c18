"""The agent API: JSON under /api/v1/ (DESIGN.md section 9), served by django-ninja.

Handlers only adapt: authenticate, parse strictly (operations.api_parsing), call one service or
selector, render. Every error is application/problem+json with a stable `code`; no request can
produce an HTML page or a 500 with a stack trace. The OpenAPI document is /api/v1/openapi.json.

The wait handler is async and parks on the shared watcher (operations.api_wait); under uvicorn it
is served by operations.api_asgi without Django's middleware, so open waits hold no threads.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pydantic
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.urls import URLPattern, include, path, re_path
from ninja import NinjaAPI, Path, Query
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer
from pydantic.json_schema import models_json_schema

from operations import api_selectors, api_wait, services
from operations.agents import agent_authenticate
from operations.api_lists import LIMIT_DEFAULT, LIMIT_MAX, open_list
from operations.api_parsing import (
    parse_idempotency_key,
    parse_json_object,
    parse_limit,
    parse_rfc3339,
    parse_timeout,
    reject_unknown_query,
    require_json_content_type,
)
from operations.api_problems import (
    PROBLEM_CONTENT_TYPE,
    PROBLEMS,
    ApiProblem,
    FieldError,
    problem_response,
)
from operations.api_schemas import INPUT_MODELS, OUTPUT_MODELS, AckIn, CancelIn, RegisterIn
from operations.models import Agent
from operations.representation import API_PREFIX, operation_object

logger = logging.getLogger(__name__)

OPERATION_ID_PATTERN = r"^op_[0-9A-HJKMNP-TV-Z]{26}$"
TIMEOUT_DOC_PATTERN = r"^[0-9]{1,4}$"
JSON_TYPE = "application/json"


# --- authentication --------------------------------------------------------------------------------


def _bearer_token(request: HttpRequest) -> str | None:
    value = request.headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class BearerToken(HttpBearer):
    """`Authorization: Bearer <token>`; the token's SHA-256 must match a live AgentToken."""

    def __init__(self, *, asynchronous: bool = False) -> None:
        super().__init__()
        # django-ninja awaits the result when this is set (the wait handler authenticates on the
        # API's database threads instead of Django's per-request thread).
        self.is_async = asynchronous

    def __call__(self, request: HttpRequest) -> Any:
        token = _bearer_token(request)
        if self.is_async:
            return self._authenticate_async(token)
        return agent_authenticate(token=token) if token else None

    async def _authenticate_async(self, token: str | None) -> Agent | None:
        return await api_wait.run_db(agent_authenticate, token=token) if token else None

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        return agent_authenticate(token=token)


bearer = BearerToken()
bearer_async = BearerToken(asynchronous=True)


# --- the API object: problem handlers and the OpenAPI document ----------------------------------------


class AgentAPI(NinjaAPI):
    """NinjaAPI whose OpenAPI document shows the exact responses each call can give."""

    response_docs: dict[str, dict] = {}

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict | None = None) -> Any:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        _, defs = models_json_schema(
            [(model, "validation") for model in INPUT_MODELS] + [(model, "serialization") for model in OUTPUT_MODELS],
            ref_template="#/components/schemas/{model}",
        )
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {}).update(defs.get("$defs", {}))
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                docs = self.response_docs.get(operation.get("operationId", ""))
                if docs is not None:
                    operation["responses"] = docs
        return schema


api = AgentAPI(
    title="pollerdash agent API",
    version="1",
    description=(
        "Register external jobs for pollerdash to watch, read their status (`done` is authoritative), "
        "wait for them within a bound, list what is open, acknowledge outcomes and cancel watches. "
        "Errors are application/problem+json with a stable `code`."
    ),
    urls_namespace="agent-api-v1",
    docs_url=None,
)


def _instance(request: HttpRequest) -> str:
    return request.path[:200]


def _problem(request: HttpRequest, exc: ApiProblem) -> HttpResponse:
    return problem_response(exc, instance=_instance(request))


def _validation_pointer(loc: tuple) -> str:
    return "/" + "/".join(str(part) for part in loc)


def _validation_problem(request: HttpRequest, errors: list[dict]) -> HttpResponse:
    """Map pydantic/ninja validation errors to the API's problem codes."""
    field_errors: list[FieldError] = []
    top = "invalid_field"
    for error in errors:
        loc = tuple(error.get("loc", ()))
        kind = str(error.get("type", ""))
        if loc[:2] == ("path", "operation_id"):
            raise Http404("operation id")
        if loc[:2] == ("query", "timeout_s"):
            top = "invalid_timeout"
            code = "pattern"
        elif kind == "extra_forbidden":
            code = "unknown_field"
        elif kind == "missing":
            code = "missing_field"
        else:
            code = "invalid_type" if kind.endswith("_type") else kind or "invalid"
        field_errors.append(FieldError(_validation_pointer(loc), code, str(error.get("msg", ""))[:200]))
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
    return _problem(request, ApiProblem(top, details[top], errors=field_errors[:20]))


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    try:
        return _validation_problem(request, list(exc.errors))
    except Http404:
        return _problem(request, api_wait.not_found(request.path.rsplit("/operations/", 1)[-1].split("/")[0]))


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ApiProblem):
        return _problem(request, exc.__cause__)
    code = {400: "invalid_json", 401: "unauthenticated", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "invalid_field"
    )
    return _problem(request, ApiProblem(code, str(exc)[:200], status=exc.status_code))


def _on_unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
    response = _problem(
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
    return _problem(request, ApiProblem("body_too_large", f"Request bodies are limited to {limit} bytes."))


def _on_404(request: HttpRequest, exc: Exception) -> HttpResponse:
    return _problem(request, ApiProblem("not_found", "No such API resource; see /api/v1/openapi.json."))


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("agent API: unexpected error on %s %s", request.method, request.path[:200])
    return _problem(request, ApiProblem("internal", "Something went wrong on our side; retry shortly."))


api.add_exception_handler(Exception, _on_unexpected)
api.add_exception_handler(ApiProblem, lambda request, exc: _problem(request, exc))
api.add_exception_handler(ValidationError, _on_validation_error)
api.add_exception_handler(HttpError, _on_http_error)
api.add_exception_handler(AuthenticationError, _on_unauthenticated)
api.add_exception_handler(RequestDataTooBig, _on_too_big)
api.add_exception_handler(Http404, _on_404)


# --- rendering ---------------------------------------------------------------------------------------


def json_response(body: dict, *, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), status=status, content_type=JSON_TYPE
    )
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def operation_response(obj: dict, *, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    extra = dict(headers or {})
    if obj["retry_after_s"] is not None:
        extra["Retry-After"] = str(obj["retry_after_s"])
    return json_response(obj, status=status, headers=extra)


def _render(op: Any) -> dict:
    return operation_object(op, open_escalation=api_selectors.open_escalation(operation=op))


def _agent(request: HttpRequest) -> Agent:
    return request.auth  # type: ignore[attr-defined,return-value]


def _json_body(request: HttpRequest, *, required: bool) -> dict[str, object] | None:
    body = request.body
    if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise RequestDataTooBig
    if not body:
        if required:
            raise ApiProblem("invalid_json", "Send a JSON object body (Content-Type: application/json).")
        return None
    require_json_content_type(request)
    return parse_json_object(body)


def _validate(model: type[pydantic.BaseModel], data: dict[str, object] | None) -> Any:
    try:
        return model.model_validate(data or {})
    except pydantic.ValidationError as exc:
        raise _SchemaProblem([{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]) from None


class _SchemaProblem(Exception):
    def __init__(self, errors: list[dict]) -> None:
        super().__init__("schema")
        self.errors = errors


api.add_exception_handler(_SchemaProblem, lambda request, exc: _validation_problem(request, exc.errors))


def _problem_docs(*codes: str) -> dict[str, dict]:
    by_status: dict[str, list[str]] = {}
    for code in codes:
        by_status.setdefault(str(PROBLEMS[code][0]), []).append(code)
    return {
        status: {
            "description": "Problem: " + ", ".join(f"`{code}`" for code in grouped),
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemOut"}}},
        }
        for status, grouped in by_status.items()
    }


def _ok_doc(description: str, model: str, headers: tuple[str, ...] = ()) -> dict:
    doc: dict[str, Any] = {
        "description": description,
        "content": {JSON_TYPE: {"schema": {"$ref": f"#/components/schemas/{model}"}}},
    }
    if headers:
        doc["headers"] = {name: {"schema": {"type": "string"}} for name in headers}
    return doc


COMMON_ERRORS = ("unauthenticated", "internal", "not_found", "unknown_field", "invalid_field", "too_many_waits")


def _docs(operation_id: str, ok: dict[str, dict], *codes: str) -> None:
    # 429 is only possible on waits; 404 not_found/operation_not_found share a status.
    wanted = [
        code
        for code in dict.fromkeys((*COMMON_ERRORS, *codes))
        if code != "too_many_waits" or operation_id == "waitOperation"
    ]
    AgentAPI.response_docs[operation_id] = {**ok, **_problem_docs(*wanted)}


def _request_body_doc(model: str, *, required: bool) -> dict:
    return {
        "requestBody": {
            "required": required,
            "content": {JSON_TYPE: {"schema": {"$ref": f"#/components/schemas/{model}"}}},
        }
    }


BODY_ERRORS = ("invalid_json", "missing_field", "body_too_large", "unsupported_media_type")


# --- endpoints ---------------------------------------------------------------------------------------


def _registration(payload: RegisterIn) -> services.AgentRegistration:
    def when(value: str | None, name: str) -> datetime | None:
        return None if value is None else parse_rfc3339(value, pointer=f"/body/{name}")

    return services.AgentRegistration(
        provider=payload.provider,
        provider_job_id=payload.provider_job_id,
        purpose=payload.purpose or "",
        deadline_at=when(payload.deadline, "deadline"),
        business_deadline_at=when(payload.business_deadline, "business_deadline"),
        max_status_requests=payload.max_status_requests,
        request_fingerprint=payload.request_fingerprint or "",
        callback_url=payload.callback.url if payload.callback is not None else None,
        metadata=payload.metadata,
    )


def _registration_problem(exc: services.RegistrationError) -> ApiProblem:
    errors = [
        FieldError("/body/" + problem.field.replace(".", "/"), problem.code, problem.message)
        for problem in exc.problems
    ]
    first = exc.problems[0]
    detail = "; ".join(f"{p.field} {p.message}" for p in exc.problems[:5])
    code = first.code if first.code in PROBLEMS and PROBLEMS[first.code][0] == 422 else "invalid_value"
    return ApiProblem(code, f"Registration refused: {detail}.", errors=errors, status=422)


def _conflict_problem(exc: services.OperationConflict) -> ApiProblem:
    extra: dict[str, object] = {}
    headers: dict[str, str] = {}
    if exc.operation is not None:
        extra["operation_id"] = exc.operation.pk
        extra["operation"] = _render(exc.operation)
    if exc.code == "idempotency_key_in_flight":
        headers["Retry-After"] = "1"
    return ApiProblem(exc.code, exc.message + ".", extra=extra, headers=headers)


@api.post(
    "/operations",
    auth=bearer,
    operation_id="registerOperation",
    summary="Register a provider job for pollerdash to watch",
    openapi_extra={
        **_request_body_doc("RegisterIn", required=True),
        "parameters": [
            {
                "in": "header",
                "name": "Idempotency-Key",
                "required": False,
                "schema": {"type": "string", "pattern": r'^"?[A-Za-z0-9_.:-]{1,255}"?$'},
                "description": "sf-string or bare token; same key + same body replays, other body is 422",
            }
        ],
    },
)
def register_operation(request: HttpRequest) -> HttpResponse:
    reject_unknown_query(request, set())
    payload = _validate(RegisterIn, _json_body(request, required=True))
    key = parse_idempotency_key(request)
    registration = _registration(payload)
    try:
        outcome = services.operation_register_for_agent(
            agent=_agent(request), request=registration, idempotency_key=key
        )
    except services.RegistrationError as exc:
        raise _registration_problem(exc) from None
    except services.OperationConflict as exc:
        raise _conflict_problem(exc) from None
    obj = _render(outcome.operation)
    location = f"{API_PREFIX}/{obj['id']}"
    headers = {"Location": location, "Content-Location": location}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    return operation_response(obj, status=200 if outcome.replayed else 202, headers=headers)


# OpenAPI links: from a registration to the calls on the operation it created.
OPERATION_LINKS = {
    name: {"operationId": operation_id, "parameters": {"operation_id": "$response.body#/id"}}
    for name, operation_id in (
        ("GetOperation", "getOperation"),
        ("WaitOperation", "waitOperation"),
        ("AcknowledgeOperation", "acknowledgeOperation"),
        ("CancelOperation", "cancelOperation"),
    )
}

_docs(
    "registerOperation",
    {
        "202": {
            **_ok_doc("Registered; the row is committed. Not done yet.", "OperationOut", ("Location", "Retry-After")),
            "links": OPERATION_LINKS,
        },
        "200": _ok_doc(
            "Replay of an earlier identical registration (Idempotent-Replayed: true)",
            "OperationOut",
            ("Location", "Idempotent-Replayed"),
        ),
    },
    *BODY_ERRORS,
    "idempotency_key_invalid",
    "multiple_idempotency_keys",
    "operation_exists",
    "idempotency_key_in_flight",
    "idempotency_key_reused",
    "unknown_provider",
    "invalid_provider_job_id",
    "deadline_in_past",
    "deadline_too_far",
    "callback_url_rejected",
)


@api.get(
    "/operations",
    auth=bearer,
    operation_id="listOperations",
    summary="Your open operations: not done, or done and not acknowledged (call this at the start of every run)",
)
def list_operations(
    request: HttpRequest,
    view: str | None = Query(None, pattern="^open$", description="only `open` exists"),
    limit: str | None = Query(None, pattern=r"^[0-9]{1,6}$", description="1-100 (larger is lowered to 100)"),
    cursor: str | None = Query(None, max_length=500, description="next_cursor of the previous page"),
) -> HttpResponse:
    reject_unknown_query(request, {"view", "limit", "cursor"})
    applied = parse_limit(limit, default=LIMIT_DEFAULT, maximum=LIMIT_MAX)
    return json_response(open_list(agent_id=_agent(request).pk, limit=applied, cursor=cursor))


_docs("listOperations", {"200": _ok_doc("A page of your open operations", "ListOut")}, "invalid_cursor")


OperationIdPath = Path(..., pattern=OPERATION_ID_PATTERN, description="op_ + 26-character ULID")


@api.get(
    "/operations/{operation_id}",
    auth=bearer,
    operation_id="getOperation",
    summary="The operation now (check `done`; while not done, agent_hint says what to call and when)",
)
def get_operation(request: HttpRequest, operation_id: str = OperationIdPath) -> HttpResponse:
    reject_unknown_query(request, set())
    op = api_selectors.agent_operation(agent_id=_agent(request).pk, operation_id=operation_id)
    if op is None:
        raise api_wait.not_found(operation_id)
    return operation_response(_render(op))


_docs(
    "getOperation",
    {"200": _ok_doc("The Operation object", "OperationOut", ("Retry-After",))},
    "operation_not_found",
)


@api.get(
    "/operations/{operation_id}/wait",
    auth=bearer_async,
    operation_id="waitOperation",
    summary="Wait until the operation is done or needs a human, at most timeout_s seconds (<= 50)",
)
async def wait_operation(
    request: HttpRequest,
    operation_id: str = OperationIdPath,
    timeout_s: str | None = Query(
        None, pattern=TIMEOUT_DOC_PATTERN, description="0-50 seconds, default 25; larger values are lowered to 50"
    ),
) -> HttpResponse:
    reject_unknown_query(request, {"timeout_s"})
    requested, applied = parse_timeout(timeout_s, default_s=settings.API_WAIT_DEFAULT_S, max_s=settings.API_WAIT_MAX_S)
    body = await api_wait.wait_result(
        agent_id=_agent(request).pk, operation_id=operation_id, requested_s=requested, applied_s=applied
    )
    return json_response(body)


_docs(
    "waitOperation",
    {"200": _ok_doc("Returned early (done or needs a human) or at the timeout (timed_out: true)", "WaitOut")},
    "operation_not_found",
    "invalid_timeout",
    "too_many_waits",
)


@api.post(
    "/operations/{operation_id}/ack",
    auth=bearer,
    operation_id="acknowledgeOperation",
    summary="Acknowledge a done operation (it leaves the open list); idempotent",
    openapi_extra=_request_body_doc("AckIn", required=False),
)
def acknowledge_operation(request: HttpRequest, operation_id: str = OperationIdPath) -> HttpResponse:
    reject_unknown_query(request, set())
    _validate(AckIn, _json_body(request, required=False))
    try:
        op = services.operation_acknowledge(agent=_agent(request), operation_id=operation_id)
    except services.OperationNotFound:
        raise api_wait.not_found(operation_id) from None
    except services.OperationConflict as exc:
        raise _conflict_problem(exc) from None
    return operation_response(_render(op))


_docs(
    "acknowledgeOperation",
    {"200": _ok_doc("Acknowledged (again)", "OperationOut")},
    *BODY_ERRORS,
    "operation_not_found",
    "operation_not_done",
)


@api.post(
    "/operations/{operation_id}/cancel",
    auth=bearer,
    operation_id="cancelOperation",
    summary="Stop watching (status closed, error.code watch_cancelled) and forward a cancel to the provider",
    openapi_extra=_request_body_doc("CancelIn", required=False),
)
def cancel_operation(request: HttpRequest, operation_id: str = OperationIdPath) -> HttpResponse:
    reject_unknown_query(request, set())
    payload = _validate(CancelIn, _json_body(request, required=False))
    try:
        op = services.operation_cancel_by_agent(
            agent=_agent(request), operation_id=operation_id, reason=payload.reason or ""
        )
    except services.OperationNotFound:
        raise api_wait.not_found(operation_id) from None
    except services.OperationConflict as exc:
        raise _conflict_problem(exc) from None
    except services.RegistrationError as exc:
        raise _registration_problem(exc) from None
    return operation_response(_render(op), status=202)


_docs(
    "cancelOperation",
    {"202": _ok_doc("Watch stopped; provider cancel forwarded in the background (see `cancel`)", "OperationOut")},
    *BODY_ERRORS,
    "operation_not_found",
    "operation_already_terminal",
    "invalid_value",
)


# --- URLs: every answer under /api/v1/ is JSON, including 404 and 405 -----------------------------------


def _json_errors(view: Callable) -> Callable:
    """Turn Django/ninja's plain-text 404/405 answers into problems."""

    def fix(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        content_type = response.get("Content-Type", "")
        if response.status_code < 400 or content_type.startswith((JSON_TYPE, PROBLEM_CONTENT_TYPE)):
            return response
        if response.status_code == 405:
            allowed = response.get("Allow", "")
            fixed = _problem(
                request,
                ApiProblem(
                    "method_not_allowed", f"{request.method} is not allowed here; use {allowed or 'another method'}."
                ),
            )
            fixed["Allow"] = allowed
            return fixed
        return _on_404(request, Http404())

    if asyncio.iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                return fix(request, await view(request, *args, **kwargs))
            except Http404:
                return _on_404(request, Http404())

        return async_wrapped

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return fix(request, view(request, *args, **kwargs))
        except Http404:
            return _on_404(request, Http404())

    wrapped.csrf_exempt = True  # type: ignore[attr-defined]
    return wrapped


def _not_found_view(request: HttpRequest, rest: str = "") -> HttpResponse:
    return _on_404(request, Http404())


_not_found_view.csrf_exempt = True  # type: ignore[attr-defined]


def _urlpatterns() -> list:
    patterns, app_name, namespace = api.urls
    wrapped = [
        URLPattern(p.pattern, _json_errors(p.callback), p.default_args, p.name) if isinstance(p, URLPattern) else p
        for p in patterns
    ]
    return [
        path("", include((wrapped, app_name), namespace=namespace)),
        re_path(r"^(?P<rest>.*)$", _not_found_view),
    ]


urlpatterns = _urlpatterns()
