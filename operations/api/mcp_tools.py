"""The MCP tools (operations/api/mcp.py serves them): each acts as the calling agent through the
same services and selectors as the JSON API, and answers in operations/api/mcp_results.py's words."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from django.conf import settings
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import StrictInt

from operations import selectors
from operations.agents import registration, services
from operations.api import selectors as api_selectors
from operations.api import wait as api_wait
from operations.api.lists import LIMIT_DEFAULT, LIMIT_MAX, open_list
from operations.api.mcp_caller import McpCaller, caller_in
from operations.api.mcp_results import error_result, headline, operation_result, problem_of
from operations.api.parsing import parse_deadline, parse_limit, parse_timeout
from operations.api.problems import not_found
from operations.api.schemas import ListOut, OperationOut
from operations.models import Agent
from operations.representation import operation_object


def _caller(ctx: Context) -> McpCaller:
    return caller_in(ctx.request_context.request)


async def _call(ctx: Context, work: Callable[[Agent], dict[str, Any]]) -> dict[str, Any]:
    agent = _caller(ctx).agent
    return await api_wait.run_db(lambda: work(agent))


async def _guarded(make: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
    try:
        return await make()
    except Exception as exc:
        problem = problem_of(exc)
        if problem is None:
            raise
        return error_result(problem)


def _render(op: Any) -> dict[str, Any]:
    return operation_object(op, open_escalation=selectors.open_escalation(operation=op))


async def _op(pending: Awaitable[dict[str, Any]]) -> CallToolResult:
    return operation_result(await pending)


async def watch_job(
    ctx: Context,
    provider: str,
    provider_job_id: str,
    purpose: str | None = None,
    deadline: str | None = None,
    max_status_requests: StrictInt | None = None,
    metadata: dict[str, str] | None = None,
) -> Annotated[CallToolResult, OperationOut]:
    def work(agent: Agent) -> dict[str, Any]:
        request = registration.AgentRegistration(
            provider=provider,
            provider_job_id=provider_job_id,
            purpose=purpose or "",
            deadline_at=parse_deadline(deadline, pointer="/deadline") if deadline is not None else None,
            max_status_requests=max_status_requests,
            metadata=metadata,
        )
        return _render(registration.operation_register_for_agent(agent=agent, request=request).operation)

    return await _guarded(lambda: _op(_call(ctx, work)))


async def get_job(ctx: Context, operation_id: str) -> Annotated[CallToolResult, OperationOut]:
    def work(agent: Agent) -> dict[str, Any]:
        op = api_selectors.agent_operation(agent_id=agent.pk, operation_id=operation_id)
        if op is None:
            raise not_found(operation_id)
        return _render(op)

    return await _guarded(lambda: _op(_call(ctx, work)))


async def wait_job(
    ctx: Context,
    operation_id: str,
    timeout_s: StrictInt = 25,
) -> Annotated[CallToolResult, OperationOut]:
    async def run() -> CallToolResult:
        # The HTTP API's rule, from the same parser: 0-9999 seconds, above the maximum lowered to it.
        requested, applied = parse_timeout(str(timeout_s), default_s=25, max_s=settings.API_WAIT_MAX_S)
        who = _caller(ctx)
        body = await api_wait.wait_result(
            agent_id=who.agent_id, operation_id=operation_id, requested_s=requested, applied_s=applied
        )
        # The token may have been revoked while the call waited: then it gets nothing more.
        await who.ensure_valid()
        note = f"(Waited at most {applied} s, the longest one call waits.) " if applied < requested else ""
        return operation_result(body["operation"], timed_out=body["timed_out"], note=note)

    return await _guarded(run)


async def list_open_jobs(
    ctx: Context,
    limit: StrictInt = 50,
    cursor: str | None = None,
) -> Annotated[CallToolResult, ListOut]:
    def work(agent: Agent) -> dict[str, Any]:
        applied = parse_limit(str(limit), default=LIMIT_DEFAULT, maximum=LIMIT_MAX)
        return open_list(agent_id=agent.pk, limit=applied, cursor=cursor)

    async def run() -> CallToolResult:
        return _open_list_result(await _call(ctx, work))

    return await _guarded(run)


def _open_list_result(body: dict[str, Any]) -> CallToolResult:
    """The open list, headed by the one word an agent must not misread."""
    counts = body["counts"]
    if counts["needs_attention"]:
        head = "NEEDS HUMAN"
    elif counts["open_not_done"]:
        head = "NOT DONE"
    elif counts["done_unacknowledged"]:
        head = f"DONE ({counts['done_unacknowledged']} finished, not acknowledged)"
    else:
        head = "DONE (nothing open)"
    summary = (
        f"{counts['open_not_done']} unfinished ({counts['needs_attention']} with a human deciding), "
        f"{counts['done_unacknowledged']} finished and not acknowledged. Never report an unfinished job as "
        "complete; read each finished one with get_job, then ack_job it."
    )
    if body.get("next_cursor"):
        summary += " More: call list_open_jobs again with cursor=next_cursor."
    lines = [f"{head}: {summary}"]
    lines += [
        f"- {headline(item)} {item['id']} {item['provider']} job {item['provider_job_id']}" for item in body["data"]
    ]
    return CallToolResult(content=[TextContent(type="text", text="\n".join(lines))], structured_content=body)


async def ack_job(ctx: Context, operation_id: str) -> Annotated[CallToolResult, OperationOut]:
    def work(agent: Agent) -> dict[str, Any]:
        return _render(services.operation_acknowledge(agent=agent, operation_id=operation_id))

    return await _guarded(lambda: _op(_call(ctx, work)))


async def cancel_job(
    ctx: Context,
    operation_id: str,
    reason: str | None = None,
) -> Annotated[CallToolResult, OperationOut]:
    def work(agent: Agent) -> dict[str, Any]:
        return _render(services.operation_cancel_by_agent(agent=agent, operation_id=operation_id, reason=reason or ""))

    return await _guarded(lambda: _op(_call(ctx, work)))


# Each tool and what an agent reads about it, in the order tools/list names them.
TOOLS: tuple[tuple[Callable[..., Awaitable[CallToolResult]], str], ...] = (
    (
        watch_job,
        "Start watching a provider job. Returns at once with NOT DONE and the operation id (op_...); "
        "registering the same job again returns the same operation. deadline: RFC 3339 with offset.",
    ),
    (get_job, "The job's status now. DONE (<status>) means finished; anything else is not."),
    (
        wait_job,
        "Wait up to timeout_s seconds (0-50, default 25) for the job to finish or need a human. "
        "TIMED OUT WAITING means still running: call again, or end your turn and use list_open_jobs next run.",
    ),
    (
        list_open_jobs,
        "Your open jobs: unfinished ones (a human deciding first) and finished ones not yet "
        "acknowledged. Call this at the start of every run.",
    ),
    (ack_job, "Acknowledge a finished job after reading its outcome; it leaves the open list."),
    (
        cancel_job,
        "Stop watching a job (it ends as closed, error watch_cancelled); pollerdash also sends the "
        "provider's cancel request where the provider has one.",
    ),
)
