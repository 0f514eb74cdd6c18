"""The MCP server's tools over the agent services (docs/DESIGN.md section 9, "MCP").

Served over Streamable HTTP at /mcp inside the web process (operations/api/mcp_http.py): every
request carries the agent's bearer token, so the tools act as that agent with the same isolation,
quotas, problem codes and audit actor as the JSON API, and call the same services and selectors.
`wait_job` parks on the same shared watcher. With the Tasks extension (operations/api/mcp_tasks.py,
and the 2025-11-25 experimental tasks in operations/api/mcp_legacy_tasks.py) `watch_job` and
`wait_job` can answer a task instead, which the client polls; `subscriptions/listen` streams
task status (operations/api/mcp_listen.py). The results' words: operations/api/mcp_results.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from django.conf import settings
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from mcp_types import SubscriptionsListenRequestParams
from pydantic import StrictInt

from operations import registration, selectors, services
from operations.api import selectors as api_selectors
from operations.api import wait as api_wait
from operations.api.lists import LIMIT_DEFAULT, LIMIT_MAX, open_list
from operations.api.mcp_caller import McpCaller, caller_in
from operations.api.mcp_legacy_tasks import legacy_tasks, task_result
from operations.api.mcp_listen import listen
from operations.api.mcp_results import database_unavailable, error_result, headline, operation_result, problem_of
from operations.api.mcp_tasks import TaskParams, TasksExtension
from operations.api.parsing import parse_deadline, parse_limit, parse_timeout
from operations.api.problems import not_found
from operations.api.schemas import ListOut, OperationOut
from operations.models import Agent
from operations.representation import operation_object

INSTRUCTIONS = (
    "pollerdash watches long-running external jobs for you. Call list_open_jobs at the start of every run: "
    "it shows unfinished jobs and finished ones you have not acknowledged. Register a job with watch_job, then "
    "wait_job (at most 50 s per call) or get_job later; a client with the tasks extension gets a task to poll "
    "instead. A job is finished only when a result says DONE; NOT DONE, NEEDS HUMAN and TIMED OUT WAITING all "
    "mean it is not finished - never report it as complete, never resubmit a job a human is deciding on. After "
    "reading a DONE result, call ack_job."
)


def build_server() -> MCPServer:
    """The server the /mcp endpoint serves: tools, the Tasks extension, task status streams."""
    server = MCPServer(
        name="pollerdash",
        instructions=INSTRUCTIONS,
        version="1",
        extensions=[TasksExtension()],
        middleware=[database_unavailable, legacy_tasks],
        # subscriptions/listen is served below, for task status only.
        subscriptions=False,
    )

    def caller(ctx: Context) -> McpCaller:
        return caller_in(ctx.request_context.request)

    async def call(ctx: Context, work: Callable[[Agent], dict[str, Any]]) -> dict[str, Any]:
        agent = caller(ctx).agent
        return await api_wait.run_db(lambda: work(agent))

    async def guarded(make: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
        try:
            return await make()
        except Exception as exc:
            problem = problem_of(exc)
            if problem is None:
                raise
            return error_result(problem)

    def render(op: Any) -> dict[str, Any]:
        return operation_object(op, open_escalation=selectors.open_escalation(operation=op))

    @server.tool(
        description="Start watching a provider job. Returns at once with NOT DONE and the operation id (op_...); "
        "registering the same job again returns the same operation. deadline: RFC 3339 with offset."
    )
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
            return render(registration.operation_register_for_agent(agent=agent, request=request).operation)

        return await guarded(lambda: _op(call(ctx, work)))

    @server.tool(description="The job's status now. DONE (<status>) means finished; anything else is not.")
    async def get_job(ctx: Context, operation_id: str) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            op = api_selectors.agent_operation(agent_id=agent.pk, operation_id=operation_id)
            if op is None:
                raise not_found(operation_id)
            return render(op)

        return await guarded(lambda: _op(call(ctx, work)))

    @server.tool(
        description="Wait up to timeout_s seconds (0-50, default 25) for the job to finish or need a human. "
        "TIMED OUT WAITING means still running: call again, or end your turn and use list_open_jobs next run."
    )
    async def wait_job(
        ctx: Context,
        operation_id: str,
        timeout_s: StrictInt = 25,
    ) -> Annotated[CallToolResult, OperationOut]:
        async def run() -> CallToolResult:
            # The HTTP API's rule, from the same parser: 0-9999 seconds, above the maximum lowered to it.
            requested, applied = parse_timeout(str(timeout_s), default_s=25, max_s=settings.API_WAIT_MAX_S)
            who = caller(ctx)
            body = await api_wait.wait_result(
                agent_id=who.agent_id, operation_id=operation_id, requested_s=requested, applied_s=applied
            )
            # The token may have been revoked while the call waited: then it gets nothing more.
            await who.ensure_valid()
            note = f"(Waited at most {applied} s, the longest one call waits.) " if applied < requested else ""
            return operation_result(body["operation"], timed_out=body["timed_out"], note=note)

        return await guarded(run)

    @server.tool(
        description="Your open jobs: unfinished ones (a human deciding first) and finished ones not yet "
        "acknowledged. Call this at the start of every run."
    )
    async def list_open_jobs(
        ctx: Context,
        limit: StrictInt = 50,
        cursor: str | None = None,
    ) -> Annotated[CallToolResult, ListOut]:
        def work(agent: Agent) -> dict[str, Any]:
            applied = parse_limit(str(limit), default=LIMIT_DEFAULT, maximum=LIMIT_MAX)
            return open_list(agent_id=agent.pk, limit=applied, cursor=cursor)

        async def run() -> CallToolResult:
            body = await call(ctx, work)
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
                f"- {headline(item)} {item['id']} {item['provider']} job {item['provider_job_id']}"
                for item in body["data"]
            ]
            return CallToolResult(content=[TextContent(type="text", text="\n".join(lines))], structured_content=body)

        return await guarded(run)

    @server.tool(description="Acknowledge a finished job after reading its outcome; it leaves the open list.")
    async def ack_job(ctx: Context, operation_id: str) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            return render(services.operation_acknowledge(agent=agent, operation_id=operation_id))

        return await guarded(lambda: _op(call(ctx, work)))

    @server.tool(
        description="Stop watching a job (it ends as closed, error watch_cancelled); pollerdash also sends the "
        "provider's cancel request where the provider has one."
    )
    async def cancel_job(
        ctx: Context,
        operation_id: str,
        reason: str | None = None,
    ) -> Annotated[CallToolResult, OperationOut]:
        def work(agent: Agent) -> dict[str, Any]:
            return render(
                services.operation_cancel_by_agent(agent=agent, operation_id=operation_id, reason=reason or "")
            )

        return await guarded(lambda: _op(call(ctx, work)))

    _refuse_unknown_arguments(server)
    # Methods the extension API cannot bind: a spec method served our way (task status only), and
    # a 2025-11-25 method the 2026-07-28 revision removed (it answers -32601 there). The pinned mcp
    # version keeps the low-level server in `_lowlevel_server` (tests/api/test_mcp.py guards this).
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, listen)
    lowlevel.add_request_handler("tasks/result", TaskParams, task_result)
    return server


def _refuse_unknown_arguments(server: MCPServer) -> None:
    """Like the JSON API's unknown_field: a misspelt argument (`deadlne`) is refused, never dropped.

    The SDK builds each tool's argument model with pydantic's default of ignoring extra keys; the
    pinned mcp version keeps the tools in `_tool_manager` (tests/api/test_mcp.py guards this)."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)


async def _op(pending: Awaitable[dict[str, Any]]) -> CallToolResult:
    return operation_result(await pending)
