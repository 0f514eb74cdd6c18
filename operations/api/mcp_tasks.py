"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over pollerdash's operations.

pollerdash already keeps every watched job durably, so a task is simply an operation: its
`taskId` is the operation id, and `tasks/get` reads the operation row (any web replica can answer;
nothing is kept per task or per session). To a client that declares the extension in a request's
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`, `watch_job` and `wait_job` answer
a CreateTaskResult while the job is not done (the registration is committed first, so `tasks/get`
resolves at once); a job that is already done gets the ordinary answer.

A task is `working` while pollerdash polls and while a person decides (its statusMessage says which,
in the dashboard's words), `completed` when the job ended — whatever the outcome — with the answer
`wait_job` would give as its `result`, and `cancelled` after the agent cancelled the watch. There is
no `input_required`: decisions belong to on-call people, not to the agent's host. `failed` is kept
for protocol errors, which a stored job never has.

Field names (docs/DESIGN.md section 9 says which sources they follow): `ttlSeconds` and
`pollIntervalMilliseconds` of SEP-2663, with `ttlMs` and `pollIntervalMs` of the extension's
published schema beside them, so a client of either reads its own. An operation as a task (its
status, message, TTL and poll interval, read for `tasks/get`): operations/api/mcp_task_view.py.
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.conf import settings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    CallToolRequestParams,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from operations.agents import registration, services
from operations.api import mcp_state
from operations.api.mcp_caller import caller_in
from operations.api.mcp_task_view import (
    CANCELLED,
    COMPLETED,
    TASK_ID_MAX,
    WORKING,
    TaskView,
    load_task,
)
from operations.api.mcp_task_view import load_tasks as load_tasks  # mcp_listen reads several tasks through here
from operations.api.wait import run_db
from operations.representation import rfc3339

EXTENSION_ID = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"watch_job", "wait_job"})
# The one answer to an unknown task, another agent's task, and a refused requestState alike.
NOT_FOUND = "Failed to retrieve task: Task not found"


def declares_tasks(meta: Any) -> bool:
    """Whether this request's `_meta` declares the extension among the client's capabilities."""
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION_ID in extensions


# --- wire shapes --------------------------------------------------------------------------------------


def request_state(view: TaskView, *, agent_id: int, now: float) -> str:
    expires = now + (view.poll_ms or 0) / 1_000 + settings.MCP_TASK_STATE_TTL_S
    return mcp_state.seal(agent_id=agent_id, task_id=view.task_id, digest=view.digest, expires_at=math.ceil(expires))


def task_fields(view: TaskView, *, agent_id: int, now: float) -> dict[str, Any]:
    """The Task of the 2026-07-28 extension (both spellings of the TTL and the interval)."""
    fields: dict[str, Any] = {
        "taskId": view.task_id,
        "status": view.status,
        "statusMessage": view.status_message,
        "createdAt": rfc3339(view.created_at),
        "lastUpdatedAt": rfc3339(view.updated_at),
        "ttlSeconds": view.ttl_s,
        "ttlMs": view.ttl_s * 1_000,
    }
    if view.poll_ms is not None:
        fields["pollIntervalMilliseconds"] = view.poll_ms
        fields["pollIntervalMs"] = view.poll_ms
    fields["requestState"] = request_state(view, agent_id=agent_id, now=now)
    return fields


def created_task(view: TaskView, *, agent_id: int) -> dict[str, Any]:
    """CreateTaskResult: `resultType: "task"` and the task's seed state (no result)."""
    return {"resultType": "task", **task_fields(view, agent_id=agent_id, now=time.time())}


def detailed_task(view: TaskView, *, agent_id: int) -> dict[str, Any]:
    """GetTaskResult / the notification's params: the task, with `result` once it completed."""
    fields = task_fields(view, agent_id=agent_id, now=time.time())
    if view.status == COMPLETED:
        fields["result"] = view.result
    return fields


def legacy_task(view: TaskView) -> dict[str, Any]:
    """The Task of 2025-11-25 (experimental tasks): TTL and interval in milliseconds, no result."""
    fields: dict[str, Any] = {
        "taskId": view.task_id,
        "status": view.status,
        "statusMessage": view.status_message,
        "createdAt": rfc3339(view.created_at),
        "lastUpdatedAt": rfc3339(view.updated_at),
        "ttl": view.ttl_s * 1_000,
    }
    if view.poll_ms is not None:
        fields["pollInterval"] = view.poll_ms
    return fields


def task_not_found() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=NOT_FOUND)


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


# --- the methods ----------------------------------------------------------------------------------------


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId", max_length=TASK_ID_MAX * 4)
    request_state: str | None = Field(default=None, alias="requestState")


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


async def _verified_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> TaskView | None:
    """The caller's task, if the echoed requestState (when there is one) is its own, unaltered and
    unexpired. A client of the extension's published schema sends none: the bearer token alone then
    decides, as it does for every other call."""
    caller = caller_in(ctx.request)
    headers = getattr(ctx.request, "headers", None) or {}
    named = headers.get("mcp-name")
    if named is not None and decode_header_value(named) != params.task_id:
        # The routing header a balancer reads must name the task the body asks about.
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match the request body's taskId")
    view = await run_db(load_task, agent_id=caller.agent_id, task_id=params.task_id)
    if view is None:
        return None
    if params.request_state is not None and not mcp_state.accepts(
        params.request_state, agent_id=caller.agent_id, task_id=view.task_id, digest=view.digest, now=time.time()
    ):
        return None
    return view


async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    view = await _verified_task(ctx, params)
    if view is None:
        raise task_not_found()
    if not is_modern(ctx):
        return legacy_task(view)
    return detailed_task(view, agent_id=caller_in(ctx.request).agent_id)


async def cancel_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    """The agent's cancel of its watch (cooperative). 2026-07-28: an empty acknowledgement, for
    unknown ids too; 2025-11-25: the task after the cancel, or -32602 for an unknown task."""
    caller = caller_in(ctx.request)
    view = await _verified_task(ctx, params)
    if view is not None and view.status == WORKING:
        try:
            await run_db(
                services.operation_cancel_by_agent, agent=caller.agent, operation_id=view.task_id, reason="tasks/cancel"
            )
        except (registration.OperationNotFound, registration.OperationConflict):
            # It ended (or went) between the read and the cancel: the cancel is only a request.
            pass
    if is_modern(ctx):
        return {}
    if view is None:
        raise task_not_found()
    after = await run_db(load_task, agent_id=caller.agent_id, task_id=view.task_id)
    if after is None:
        raise task_not_found()
    if after.status != CANCELLED:
        raise MCPError(code=INVALID_PARAMS, message=f"Cannot cancel task: it is already {after.status}")
    return legacy_task(after)


async def update_task(ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
    """pollerdash never asks an agent's host for input (people decide on the dashboard), so there is
    nothing to answer; the extension asks for an empty acknowledgement whatever the task."""
    return {}


class TasksExtension(Extension):
    identifier = EXTENSION_ID

    def methods(self) -> list[MethodBinding]:
        both = frozenset({"2025-11-25", *MODERN_PROTOCOL_VERSIONS})
        return [
            MethodBinding("tasks/get", TaskParams, get_task, protocol_versions=both),
            MethodBinding("tasks/cancel", TaskParams, cancel_task, protocol_versions=both),
            MethodBinding(
                "tasks/update", UpdateTaskParams, update_task, protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS)
            ),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not is_modern(ctx) or not declares_tasks(ctx.meta):
            return await call_next(ctx)
        caller = caller_in(ctx.request)
        arguments = params.arguments or {}
        if params.name == "wait_job":
            operation_id = arguments.get("operation_id")
            if not isinstance(operation_id, str) or not _plain_wait_arguments(arguments):
                # The tool itself names what is wrong with the arguments.
                return await call_next(ctx)
            view = await run_db(load_task, agent_id=caller.agent_id, task_id=operation_id)
            if view is None or view.status != WORKING:
                # Unknown (the tool says so) or already done (its ordinary answer is the final one).
                return await call_next(ctx)
            return created_task(view, agent_id=caller.agent_id)
        answered = await call_next(ctx)
        content = _structured(answered)
        if content is None or content.get("done") is not False:
            return answered
        view = await run_db(load_task, agent_id=caller.agent_id, task_id=str(content["id"]))
        if view is None or view.status != WORKING:
            return answered
        return created_task(view, agent_id=caller.agent_id)


def _plain_wait_arguments(arguments: dict[str, Any]) -> bool:
    """wait_job's arguments as the tool accepts them (operation_id, an optional whole timeout_s)."""
    if set(arguments) - {"operation_id", "timeout_s"}:
        return False
    timeout = arguments.get("timeout_s", 0)
    return isinstance(timeout, int) and not isinstance(timeout, bool) and 0 <= timeout <= 9999


def _structured(result: HandlerResult) -> dict[str, Any] | None:
    """The Operation object of a successful tool answer (typed or already on the wire)."""
    if isinstance(result, dict):
        content, error = result.get("structuredContent"), result.get("isError")
    else:
        content, error = getattr(result, "structured_content", None), getattr(result, "is_error", None)
    if error or not isinstance(content, dict) or content.get("object") != "operation":
        return None
    return content
