"""The agent API: JSON under /api/v1/ (docs/DESIGN.md section 9), served by django-ninja.

Handlers only adapt: authenticate, parse strictly (operations.api.parsing), call one service or
selector, render. Every error is application/problem+json with a stable `code`
(operations.api.errors); the OpenAPI document is /api/v1/openapi.json (operations.api.docs).

Under uvicorn, operations.api.asgi serves these URLs on the event loop and a fixed database thread
pool: the async wait holds no thread while it waits.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import URLPattern, include, path, re_path
from ninja import Path, Query

from operations.agents import registration, services
from operations.api import docs
from operations.api import errors as api_errors
from operations.api import events as api_events
from operations.api import selectors as api_selectors
from operations.api import wait as api_wait
from operations.api.answers import json_response, operation_response, render
from operations.api.bearer import BearerToken
from operations.api.errors import json_body, no_such_resource, validate
from operations.api.lists import LIMIT_DEFAULT, LIMIT_MAX, open_list
from operations.api.parsing import (
    parse_deadline,
    parse_idempotency_key,
    parse_limit,
    parse_timeout,
    reject_unknown_query,
)
from operations.api.problems import PROBLEMS, ApiProblem, FieldError, not_found, quota_exceeded
from operations.api.schemas import AckIn, CancelIn, RegisterIn
from operations.limits import quotas
from operations.models import Agent
from operations.representation import API_PREFIX

OPERATION_ID_PATTERN = r"^op_[0-9A-HJKMNP-TV-Z]{26}$"
TIMEOUT_DOC_PATTERN = r"^[0-9]{1,4}$"


bearer = BearerToken()
bearer_async = BearerToken(asynchronous=True)

api = docs.DocumentedAPI(
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
api_errors.install(api)


def _agent(request: HttpRequest) -> Agent:
    # django-ninja sets request.auth to what the bearer check returned (an Agent); HttpRequest has no such field.
    return request.auth  # type: ignore[attr-defined]


# --- endpoints ---------------------------------------------------------------------------------------


def _registration(payload: RegisterIn) -> registration.AgentRegistration:
    def when(value: str | None, name: str) -> datetime | None:
        return None if value is None else parse_deadline(value, pointer=f"/body/{name}")

    return registration.AgentRegistration(
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


def _registration_problem(exc: registration.RegistrationError, *, refused: str = "Registration refused") -> ApiProblem:
    errors = [
        FieldError("/body/" + problem.field.replace(".", "/"), problem.code, problem.message)
        for problem in exc.problems
    ]
    first = exc.problems[0]
    detail = "; ".join(f"{p.field} {p.message}" for p in exc.problems[:5])
    code = first.code if first.code in PROBLEMS and PROBLEMS[first.code][0] == 422 else "invalid_value"
    return ApiProblem(code, f"{refused}: {detail}.", errors=errors, status=422)


def _conflict_problem(exc: registration.OperationConflict) -> ApiProblem:
    extra: dict[str, object] = {}
    headers: dict[str, str] = {}
    if exc.operation is not None:
        extra["operation_id"] = exc.operation.pk
        extra["operation"] = render(exc.operation)
    if exc.code == "idempotency_key_in_flight":
        headers["Retry-After"] = "1"
    return ApiProblem(exc.code, exc.message + ".", extra=extra, headers=headers)


@api.post(
    "/operations",
    auth=bearer,
    operation_id="registerOperation",
    summary="Register a provider job for pollerdash to watch",
    openapi_extra={
        **docs.request_body("RegisterIn", required=True),
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
    payload = validate(RegisterIn, json_body(request, required=True))
    key = parse_idempotency_key(request)
    wanted = _registration(payload)
    try:
        outcome = registration.operation_register_for_agent(agent=_agent(request), request=wanted, idempotency_key=key)
    except registration.RegistrationError as exc:
        raise _registration_problem(exc) from None
    except registration.OperationConflict as exc:
        raise _conflict_problem(exc) from None
    except quotas.QuotaExceeded as exc:
        raise quota_exceeded(quota=exc.quota, message=exc.message, retry_after_s=exc.retry_after_s) from None
    obj = render(outcome.operation)
    location = f"{API_PREFIX}/{obj['id']}"
    headers = {"Location": location, "Content-Location": location}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    return operation_response(obj, status=200 if outcome.replayed else 202, headers=headers)


docs.document(
    "registerOperation",
    {
        "202": docs.ok(
            "Registered; the row is committed. Not done yet.",
            "OperationOut",
            ("Location", "Retry-After"),
            links=docs.OPERATION_LINKS,
        ),
        "200": docs.ok(
            "Replay of an earlier identical registration (Idempotent-Replayed: true)",
            "OperationOut",
            ("Location", "Idempotent-Replayed"),
        ),
    },
    *docs.BODY_ERRORS,
    "idempotency_key_invalid",
    "multiple_idempotency_keys",
    "operation_exists",
    "job_already_watched",
    "idempotency_key_in_flight",
    "idempotency_key_reused",
    "unknown_provider",
    "invalid_provider_job_id",
    "deadline_in_past",
    "deadline_too_far",
    "callback_url_rejected",
    "quota_exceeded",
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
    limit: str | None = Query(None, pattern=r"^[0-9]{1,9}$", description="1-100 (larger is lowered to 100)"),
    cursor: str | None = Query(None, description="next_cursor of the previous page"),
) -> HttpResponse:
    reject_unknown_query(request, {"view", "limit", "cursor"})
    applied = parse_limit(limit, default=LIMIT_DEFAULT, maximum=LIMIT_MAX)
    return json_response(open_list(agent_id=_agent(request).pk, limit=applied, cursor=cursor))


docs.document("listOperations", {"200": docs.ok("A page of your open operations", "ListOut")}, "invalid_cursor")


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
        raise not_found(operation_id)
    return operation_response(render(op))


docs.document(
    "getOperation",
    {"200": docs.ok("The Operation object", "OperationOut", ("Retry-After",))},
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
    # Like every not-done answer: when asking again is worth it.
    retry_s = body["operation"]["retry_after_s"]
    return json_response(body, headers={"Retry-After": str(retry_s)} if retry_s is not None else None)


docs.document(
    "waitOperation",
    {"200": docs.ok("Returned early (done or needs a human) or at the timeout (timed_out: true)", "WaitOut")},
    "operation_not_found",
    "invalid_timeout",
    "too_many_waits",
)


@api.get(
    "/operations/{operation_id}/events",
    auth=bearer_async,
    operation_id="streamOperationEvents",
    summary="Server-sent events: one `operation` event per change (id = sequence; resume with Last-Event-ID)",
)
async def operation_events(request: HttpRequest, operation_id: str = OperationIdPath) -> HttpResponseBase:
    reject_unknown_query(request, set())
    agent_id = _agent(request).pk
    first = await api_events.first_state(agent_id=agent_id, operation_id=operation_id)
    after = api_events.last_event_id(request.headers.get("Last-Event-ID"))
    if first["done"] and after is not None and after >= first["sequence"]:
        # The client has the final event: 204 tells an EventSource to stop reconnecting.
        finished = HttpResponse(status=204)
        finished["Cache-Control"] = "no-store"
        return finished
    response = StreamingHttpResponse(
        api_events.stream(agent_id=agent_id, operation_id=operation_id, first=first, after=after),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # nginx would otherwise hold the events back
    return response


docs.document(
    "streamOperationEvents",
    {
        "200": {
            "description": "text/event-stream of `operation` events (data: the Operation object)",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        "204": {"description": "Last-Event-ID already names the final event: stop reconnecting"},
    },
    "operation_not_found",
)


@api.post(
    "/operations/{operation_id}/ack",
    auth=bearer,
    operation_id="acknowledgeOperation",
    summary="Acknowledge a done operation (it leaves the open list); idempotent",
    openapi_extra=docs.request_body("AckIn", required=False),
)
def acknowledge_operation(request: HttpRequest, operation_id: str = OperationIdPath) -> HttpResponse:
    reject_unknown_query(request, set())
    validate(AckIn, json_body(request, required=False))
    try:
        op = services.operation_acknowledge(agent=_agent(request), operation_id=operation_id)
    except registration.OperationNotFound:
        raise not_found(operation_id) from None
    except registration.OperationConflict as exc:
        raise _conflict_problem(exc) from None
    return operation_response(render(op))


docs.document(
    "acknowledgeOperation",
    {"200": docs.ok("Acknowledged (again)", "OperationOut")},
    *docs.BODY_ERRORS,
    "operation_not_found",
    "operation_not_done",
)


@api.post(
    "/operations/{operation_id}/cancel",
    auth=bearer,
    operation_id="cancelOperation",
    summary="Stop watching (status closed, error.code watch_cancelled) and forward a cancel to the provider",
    openapi_extra=docs.request_body("CancelIn", required=False),
)
def cancel_operation(request: HttpRequest, operation_id: str = OperationIdPath) -> HttpResponse:
    reject_unknown_query(request, set())
    payload = validate(CancelIn, json_body(request, required=False))
    try:
        op = services.operation_cancel_by_agent(
            agent=_agent(request), operation_id=operation_id, reason=payload.reason or ""
        )
    except registration.OperationNotFound:
        raise not_found(operation_id) from None
    except registration.OperationConflict as exc:
        raise _conflict_problem(exc) from None
    except registration.RegistrationError as exc:
        raise _registration_problem(exc, refused="Cancel refused") from None
    return operation_response(render(op), status=202)


docs.document(
    "cancelOperation",
    {"202": docs.ok("Watch stopped; provider cancel forwarded in the background (see `cancel`)", "OperationOut")},
    *docs.BODY_ERRORS,
    "operation_not_found",
    "operation_already_terminal",
    "invalid_value",
)


# --- URLs: every answer under /api/v1/ is JSON, including 404 and 405 -----------------------------------


def _unknown_path(request: HttpRequest, rest: str = "") -> HttpResponse:
    return no_such_resource(request)


# Django's own marker on a view function (read by CsrfViewMiddleware).
_unknown_path.csrf_exempt = True  # type: ignore[attr-defined]


def _urlpatterns() -> list:
    patterns, app_name, namespace = api.urls
    wrapped = [
        URLPattern(p.pattern, api_errors.json_answers_only(p.callback), p.default_args, p.name)
        if isinstance(p, URLPattern)
        else p
        for p in patterns
    ]
    return [
        path("", include((wrapped, app_name), namespace=namespace)),
        re_path(r"^(?P<rest>.*)$", _unknown_path),
    ]


urlpatterns = _urlpatterns()
