"""The 2025-11-25 experimental tasks, for clients that still speak them (over the 2025-11-25 handshake).

There a client asks for a task itself (`params.task` on `tools/call`), reads it with `tasks/get`,
waits for the outcome with `tasks/result` (which blocks until the job is done) and stops it with
`tasks/cancel`. pollerdash serves these for `watch_job` and `wait_job` (declared with
`execution.taskSupport: "optional"` and the `tasks.requests.tools.call` and `tasks.cancel`
capabilities) on the same operations as the 2026-07-28 extension (operations/api/mcp_tasks.py).

Not served: `tasks/list` (not declared; -32601), task-augmented requests from the server to the
client (elicitation, sampling), and task augmentation of any other tool (-32601).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

from operations.api.mcp_caller import REVOKED, UNAUTHENTICATED_CODE, caller_in
from operations.api.mcp_results import error_result
from operations.api.mcp_tasks import TASK_TOOLS, WORKING, TaskParams, TaskView, legacy_task, load_task, task_not_found
from operations.api.problems import ApiProblem, not_found
from operations.api.wait import run_db, wait_for_change

VERSION = "2025-11-25"
CAPABILITY: dict[str, Any] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
RELATED_TASK = "io.modelcontextprotocol/related-task"


async def legacy_tasks(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: the 2025-11-25 task declarations and task-augmented `tools/call`."""
    if ctx.method == "initialize":
        result = await call_next(ctx)
        if isinstance(result, dict) and result.get("protocolVersion") == VERSION:
            result = {**result, "capabilities": {**(result.get("capabilities") or {}), "tasks": CAPABILITY}}
        return result
    if ctx.protocol_version != VERSION:
        return await call_next(ctx)
    if ctx.method == "tools/list":
        result = await call_next(ctx)
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            tools = [
                {**tool, "execution": {"taskSupport": "optional"}} if tool.get("name") in TASK_TOOLS else tool
                for tool in result["tools"]
            ]
            result = {**result, "tools": tools}
        return result
    params = ctx.params or {}
    if ctx.method == "tools/call" and params.get("task") is not None:
        return await _task_call(ctx, call_next)
    return await call_next(ctx)


async def _task_call(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    params = {key: value for key, value in (ctx.params or {}).items() if key != "task"}
    name = params.get("name")
    if name not in TASK_TOOLS:
        raise MCPError(code=METHOD_NOT_FOUND, message=f"Tool {str(name)[:60]!r} does not support tasks")
    caller = caller_in(ctx.request)
    arguments = params.get("arguments") or {}
    if name == "wait_job":
        operation_id = arguments.get("operation_id") if isinstance(arguments, dict) else None
        view = await run_db(load_task, agent_id=caller.agent_id, task_id=operation_id) if operation_id else None
        if view is None:
            refused = error_result(not_found(str(operation_id or "")))
            # Typing: error_result always answers one TextContent; the SDK types content as a union of kinds.
            raise MCPError(code=INVALID_PARAMS, message=refused.content[0].text, data=refused.structured_content)  # type: ignore[union-attr]
        return {"task": legacy_task(view)}
    answered = await call_next(dataclasses.replace(ctx, params=params))
    content = answered.get("structuredContent") if isinstance(answered, dict) else None
    if not isinstance(answered, dict) or answered.get("isError") or not isinstance(content, dict):
        text = _text(answered)
        raise MCPError(code=INVALID_PARAMS, message=text, data=content)
    view = await run_db(load_task, agent_id=caller.agent_id, task_id=str(content["id"]))
    if view is None:
        raise task_not_found()
    return {"task": legacy_task(view)}


def _text(answered: HandlerResult) -> str:
    content = answered.get("content") if isinstance(answered, dict) else None
    if isinstance(content, list) and content and isinstance(content[0], dict):
        return str(content[0].get("text", ""))[:500]
    return "The tool refused the call."


async def task_result(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    """`tasks/result`: wait until the job is done, then answer what wait_job answers for it.

    The token is checked again every MCP_STREAM_RECHECK_S while the call waits, so a revoked
    token's call ends (-32001) instead of handing out the outcome. At 2026-07-28, which removed the
    method, it is -32601 like any method this server does not serve."""
    if ctx.protocol_version != VERSION:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data="tasks/result")
    caller = caller_in(ctx.request)
    view: TaskView | None = await run_db(load_task, agent_id=caller.agent_id, task_id=params.task_id)
    while view is not None and view.status == WORKING:
        try:
            await wait_for_change(
                agent_id=caller.agent_id,
                operation_id=view.task_id,
                timeout_s=settings.MCP_STREAM_RECHECK_S,
                after_sequence=view.sequence,
            )
        except ApiProblem as exc:
            raise MCPError(code=INVALID_PARAMS, message=exc.detail, data={"code": exc.code}) from None
        if not await caller.still_valid():
            raise MCPError(code=UNAUTHENTICATED_CODE, message=REVOKED)
        view = await run_db(load_task, agent_id=caller.agent_id, task_id=view.task_id)
    if view is None or view.result is None:
        raise task_not_found()
    result = dict(view.result)
    result["_meta"] = {**(result.get("_meta") or {}), RELATED_TASK: {"taskId": view.task_id}}
    return result
