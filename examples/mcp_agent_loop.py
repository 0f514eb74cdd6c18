"""An agent's loop over MCP: register a job, get a task, poll it across a person's decision, print the result.

Run it against `make demo` (in another terminal), with a token for your agent:

    .venv/bin/python manage.py create_agent_token example-bot      # prints pdt_…
    POLLERDASH_URL=http://127.0.0.1:8000 POLLERDASH_TOKEN=pdt_… \
        .venv/bin/python examples/mcp_agent_loop.py --provider fake-export \
        --job "slow_success__polls=5__run=$RANDOM" --max-status-requests 2

With a budget of 2 status checks for a job that needs 5, pollerdash stops after the second check and
hands the job to on-call; the task says "waiting for an on-call decision: request budget spent
(card N)". Extend it on the dashboard (http://127.0.0.1:8000/, "Extend … / 4 checks") and the loop
carries on by itself until the job is done.

It uses the official MCP client (`mcp`) over Streamable HTTP with nothing but the agent's token.
The SDK has no Tasks client yet, so the extension's few pieces are here: declare it, claim the
`resultType: "task"` answer, send `tasks/get` with the latest `requestState`, and wait the
`pollIntervalMilliseconds` the server asks for.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"


class CreateTaskResult(types.Result):
    model_config = ConfigDict(extra="allow")  # requestState, pollIntervalMilliseconds, … stay readable
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    task_id: str


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"  # the extension routes tasks/* by `Mcp-Name: <taskId>`


class Task(types.Result):
    model_config = ConfigDict(extra="allow")


async def _poll_yourself(result: CreateTaskResult, ctx: Any) -> types.CallToolResult:
    raise RuntimeError("this example polls the task itself (call_tool(..., allow_claimed=True))")


class TasksExtension(ClientExtension):
    """Declares the Tasks extension on every request, and accepts a task as a tools/call answer."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=_poll_yourself)]


def extra(result: types.Result) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def run(
    *, url: str, token: str, provider: str, job: str, max_status_requests: int | None, deadline: str | None
) -> int:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=90))
    async with (
        http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), extensions=[TasksExtension()]) as mcp,
    ):
        arguments: dict[str, Any] = {"provider": provider, "provider_job_id": job}
        if max_status_requests is not None:
            arguments["max_status_requests"] = max_status_requests
        if deadline is not None:
            arguments["deadline"] = deadline
        answer = await mcp.session.call_tool("watch_job", arguments, allow_claimed=True)
        if not isinstance(answer, CreateTaskResult):
            # Already done (or refused): the ordinary tool answer is the final one.
            # Typing: pollerdash answers a tool call with one TextContent first; the SDK types content as any kind.
            print(answer.content[0].text)  # type: ignore[union-attr]
            return 1 if getattr(answer, "is_error", False) else 0
        task = extra(answer)
        print(f"task {task['taskId']}: {task['status']} - {task.get('statusMessage')}", flush=True)
        said = task.get("statusMessage")
        while task["status"] == "working":
            await asyncio.sleep(task.get("pollIntervalMilliseconds", 1000) / 1000)
            # Echo the latest requestState: any pollerdash web process can answer with it.
            params = TaskParams(task_id=task["taskId"], requestState=task.get("requestState"))
            task = extra(await mcp.session.send_request(GetTask(params=params), Task))
            if task.get("statusMessage") != said:
                said = task.get("statusMessage")
                print(f"task {task['taskId']}: {task['status']} - {said}", flush=True)
        if task["status"] != "completed":
            print(f"task {task['taskId']} ended {task['status']}")
            return 1
        result = task["result"]
        print(result["content"][0]["text"], flush=True)
        outcome = result.get("structuredContent") or {}
        print(f"result: {outcome.get('result')}", flush=True)
        acked = await mcp.call_tool("ack_job", {"operation_id": task["taskId"]})
        # Typing: as above, the first content is pollerdash's TextContent.
        print(acked.content[0].text.split(".")[0], flush=True)  # type: ignore[union-attr]
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description="An MCP agent loop over pollerdash's Tasks extension.")
    parser.add_argument("--provider", default="fake-export")
    parser.add_argument("--job", required=True, help="the provider's job id (the demo: slow_success__polls=5__run=1)")
    parser.add_argument("--max-status-requests", type=int, default=None)
    parser.add_argument("--deadline", default=None, help="RFC 3339 with offset, e.g. 2026-12-06T12:00:00Z")
    args = parser.parse_args()
    url, token = os.environ.get("POLLERDASH_URL", "").rstrip("/"), os.environ.get("POLLERDASH_TOKEN", "")
    if not url or not token:
        sys.exit("set POLLERDASH_URL and POLLERDASH_TOKEN")
    sys.exit(
        asyncio.run(
            run(
                url=url,
                token=token,
                provider=args.provider,
                job=args.job,
                max_status_requests=args.max_status_requests,
                deadline=args.deadline,
            )
        )
    )


if __name__ == "__main__":
    main()
