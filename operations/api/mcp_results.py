"""What an MCP tool answers, in words a model cannot misread, and its structured content.

Every result's text starts with `DONE (<status>)`, `NOT DONE`, `NEEDS HUMAN` or `TIMED OUT WAITING`,
and its structured content is the Operation object (the list object for `list_open_jobs`). Bad
input comes back as an error result naming the problem code. A task's final `result` (the Tasks
extension, operations/api/mcp_tasks.py) is the same answer `wait_job` gives.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from mcp_types import INTERNAL_ERROR

from operations.agents import registration
from operations.api.problems import ApiProblem, not_found, problem_body, quota_exceeded
from operations.limits import quotas

logger = logging.getLogger("operations.api.mcp")


def headline(obj: dict[str, Any], *, timed_out: bool = False) -> str:
    """The first words of every tool result: the one thing a model must not misread."""
    if obj["done"]:
        return f"DONE ({obj['status']})"
    if obj["status"] == "needs_attention":
        return "NEEDS HUMAN"
    if timed_out:
        return "TIMED OUT WAITING (job still running)"
    return "NOT DONE"


def next_step(obj: dict[str, Any]) -> str:
    """What to do next, in this server's tools: an MCP agent has no HTTP access to follow the
    API's own hint (which names HTTP calls)."""
    later = f"in {obj['retry_after_s']} s or later" if obj["retry_after_s"] is not None else "later"
    if obj["status"] == "needs_attention":
        reason = (obj.get("escalation") or {}).get("reason") or "stopped"
        deciding = "whether the result is still wanted" if reason == "business_deadline_passed" else "what happens next"
        return (
            f"A human is deciding {deciding} ({reason}). Do not resubmit the job and do not report it as "
            f"complete. Check again with get_job {later}, or end your turn: list_open_jobs shows it next run."
        )
    if not obj["done"]:
        return (
            "Do not report it as complete. Call wait_job now (it returns when the job finishes), or get_job "
            f"{later}, or end your turn: list_open_jobs shows it next run."
        )
    ack = "" if obj["acknowledged_at"] else " Then call ack_job."
    if obj["result"] is not None:
        return f"The result is in the structured content (`result`).{ack}"
    error = obj["error"] or {}
    return (
        f"It ended {obj['status']} ({error.get('code')}); details are in `error`. Do not resubmit it "
        f"automatically; report the outcome.{ack}"
    )


def operation_result(obj: dict[str, Any], *, timed_out: bool = False, note: str = "") -> CallToolResult:
    text = (
        f"{headline(obj, timed_out=timed_out)} {obj['id']} ({obj['provider']} job {obj['provider_job_id']}). "
        f"{note}{next_step(obj)}"
    )
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=obj)


def error_result(problem: ApiProblem) -> CallToolResult:
    body = problem_body(problem)
    text = f"ERROR {problem.code}: {problem.detail}"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body, is_error=True)


def unavailable() -> ApiProblem:
    """The database is restarting or unreachable: what the JSON API answers (503), in MCP's words too."""
    return ApiProblem(
        "unavailable", "The database is not reachable right now; retry in a few seconds.", headers={"Retry-After": "5"}
    )


async def database_unavailable(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: a database outage under any method answers -32603 with the API's
    `unavailable` code and a retry time, and logs one line instead of a traceback."""
    try:
        return await call_next(ctx)
    except DatabaseError as exc:
        problem = problem_of(exc)
        assert problem is not None
        raise MCPError(
            code=INTERNAL_ERROR, message=problem.detail, data={"code": problem.code, "retry_after_s": 5}
        ) from None


def problem_of(exc: Exception) -> ApiProblem | None:
    if isinstance(exc, ApiProblem):
        return exc
    if isinstance(exc, DatabaseError):
        logger.warning("MCP: database unavailable (%s)", exc)
        return unavailable()
    if isinstance(exc, registration.OperationNotFound):
        return not_found(str(exc))
    if isinstance(exc, registration.OperationConflict):
        return ApiProblem(exc.code, exc.message + ".")
    if isinstance(exc, quotas.QuotaExceeded):
        return quota_exceeded(quota=exc.quota, message=exc.message, retry_after_s=exc.retry_after_s)
    if isinstance(exc, registration.RegistrationError):
        return ApiProblem(
            exc.problems[0].code if exc.problems[0].code != "invalid_field" else "invalid_value",
            f"{exc}.",
            status=422,
        )
    return None
