"""The official `mcp` client against /mcp: a client with or without the Tasks extension, task requests.

The SDK (mcp 2.3.0) has no Tasks module on the client side either: `TasksClient` declares the
extension and claims the `resultType: "task"` answer, and `tasks_get` / `tasks_cancel` send the
extension's methods (with `Mcp-Name: <taskId>`, as the extension asks) through the SDK's session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict

EXTENSION_ID = "io.modelcontextprotocol/tasks"
PROTOCOL = "2026-07-28"


class CreateTaskResult(types.Result):
    """The extension's task handle, as the client receives it (every wire field kept)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    task_id: str


class TaskResult(types.Result):
    model_config = ConfigDict(extra="allow")


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


class RawRequest(types.Request[TaskParams, str]):
    """Any method by name (tasks/result, tasks/list), to see what the server answers."""

    method: str
    params: TaskParams
    name_param = "taskId"


async def _not_resolved(result: CreateTaskResult, ctx: Any) -> types.CallToolResult:
    raise AssertionError("the tests read tasks with allow_claimed=True")


class TasksClient(ClientExtension):
    identifier = EXTENSION_ID

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=_not_resolved)]


def wire(result: types.Result) -> dict[str, Any]:
    """A result as it came over the wire (aliases, extra fields)."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


@asynccontextmanager
async def mcp_client(
    url: str, token: str, *, tasks: bool = False, mode: str = "auto", headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}", **(headers or {})}, timeout=httpx2.Timeout(30, read=90)
    )
    async with http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, extensions=[TasksClient()] if tasks else None, mode=mode) as client:
            yield client


async def tasks_get(client: Client, task_id: str, request_state: str | None = None) -> dict[str, Any]:
    params = TaskParams(task_id=task_id, **({"requestState": request_state} if request_state is not None else {}))
    return wire(await client.session.send_request(GetTask(params=params), TaskResult))


async def tasks_cancel(client: Client, task_id: str, request_state: str | None = None) -> dict[str, Any]:
    params = TaskParams(task_id=task_id, **({"requestState": request_state} if request_state is not None else {}))
    return wire(await client.session.send_request(CancelTask(params=params), TaskResult))


async def raw_request(client: Client, method: str, task_id: str) -> dict[str, Any]:
    return wire(
        await client.session.send_request(RawRequest(method=method, params=TaskParams(task_id=task_id)), TaskResult)
    )
