"""How the agent API answers: compact JSON, never cached, and the Operation object (DESIGN section 9)."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

from operations import selectors
from operations.representation import operation_object

JSON_TYPE = "application/json"


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


def render(op: Any) -> dict:
    return operation_object(op, open_escalation=selectors.open_escalation(operation=op))
