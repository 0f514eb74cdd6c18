"""RFC 9457 problem details for every error the agent API returns.

Each problem has a stable snake_case `code` (clients branch on it, never on the text) and a
`detail` written as an instruction the caller can act on. Field-level problems go in `errors`
with a JSON pointer into the request (`/body/deadline`, `/query/timeout_s`, `/header/...`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.http import HttpResponse

PROBLEM_TYPE_BASE = "https://pollerdash.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"

# code -> (HTTP status, title). Titles stay the same for every occurrence (RFC 9457 3.1.4).
PROBLEMS: dict[str, tuple[int, str]] = {
    "invalid_json": (400, "Request body is not an acceptable JSON object"),
    "unknown_field": (400, "Unknown field"),
    "invalid_field": (400, "Invalid field"),
    "missing_field": (400, "Missing field"),
    "invalid_timeout": (400, "Invalid wait timeout"),
    "invalid_cursor": (400, "Invalid cursor"),
    "idempotency_key_invalid": (400, "Invalid Idempotency-Key"),
    "host_not_allowed": (400, "Host not allowed"),
    "multiple_idempotency_keys": (400, "More than one Idempotency-Key"),
    "unauthenticated": (401, "Missing, unknown or revoked API token"),
    "origin_not_allowed": (403, "Origin not allowed"),
    "operation_not_found": (404, "Operation not found"),
    "not_found": (404, "No such API resource"),
    "method_not_allowed": (405, "Method not allowed"),
    "operation_exists": (409, "Operation already exists"),
    "job_already_watched": (409, "Job already watched by another client"),
    "idempotency_key_in_flight": (409, "Request with this Idempotency-Key is still in progress"),
    "operation_already_terminal": (409, "Operation already finished"),
    "operation_not_done": (409, "Operation not done"),
    "body_too_large": (413, "Request body too large"),
    "unsupported_media_type": (415, "Unsupported media type"),
    "idempotency_key_reused": (422, "Idempotency-Key reused with a different request"),
    "unknown_provider": (422, "Unknown provider"),
    "invalid_provider_job_id": (422, "Invalid provider job id"),
    "deadline_in_past": (422, "Deadline too soon"),
    "deadline_too_far": (422, "Deadline too far ahead"),
    "callback_url_rejected": (422, "Callback URL rejected"),
    "invalid_value": (422, "Value not accepted"),
    "too_many_waits": (429, "Too many concurrent waits"),
    "quota_exceeded": (429, "Quota exceeded"),
    "internal": (500, "Internal error"),
    "unavailable": (503, "Temporarily unavailable"),
}


@dataclass(frozen=True)
class FieldError:
    pointer: str
    code: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"pointer": self.pointer, "code": self.code, "detail": self.detail}


@dataclass
class ApiProblem(Exception):
    """Raised anywhere in the API layer; rendered as one problem+json response."""

    code: str
    detail: str
    errors: list[FieldError] = field(default_factory=list)
    status: int | None = None  # overrides the catalogue's status (422 for rejected field values)
    extra: dict[str, object] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"

    @property
    def http_status(self) -> int:
        return self.status or PROBLEMS[self.code][0]


def problem_body(problem: ApiProblem, *, instance: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {
        "type": PROBLEM_TYPE_BASE + problem.code,
        "title": PROBLEMS[problem.code][1],
        "status": problem.http_status,
        "code": problem.code,
        "detail": problem.detail,
    }
    if instance:
        body["instance"] = instance
    if problem.errors:
        body["errors"] = [error.as_dict() for error in problem.errors]
    body.update(problem.extra)
    return body


def problem_response(problem: ApiProblem, *, instance: str | None = None) -> HttpResponse:
    response = HttpResponse(
        json.dumps(problem_body(problem, instance=instance), separators=(",", ":")).encode(),
        status=problem.http_status,
        content_type=PROBLEM_CONTENT_TYPE,
    )
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    for name, value in problem.headers.items():
        response[name] = value
    return response


def not_found(operation_id: str) -> ApiProblem:
    """Unknown ids and other agents' ids get the same answer: nothing to enumerate."""
    return ApiProblem(
        "operation_not_found",
        f"You have no operation {operation_id[:40]!r}. List yours with GET /api/v1/operations?view=open.",
        extra={"operation_id": operation_id[:40]},
    )


def quota_exceeded(*, quota: str, message: str, retry_after_s: int) -> ApiProblem:
    """A refusal by one of the agent's quotas (operations.limits.quotas): the API and MCP answer alike."""
    return ApiProblem(
        "quota_exceeded",
        message + ".",
        extra={"quota": quota, "retry_after_s": retry_after_s},
        headers={"Retry-After": str(retry_after_s)},
    )
