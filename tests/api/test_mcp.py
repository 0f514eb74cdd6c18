"""The MCP server, spoken to over stdio with the `mcp` client, as an MCP host would."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from operations.controller import poll_once
from operations.models import Operation
from tests.api.conftest import run_async, subprocess_env
from tests.support import job_id

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"watch_job", "get_job", "wait_job", "list_open_jobs", "ack_job", "cancel_job"}


def poll_now(operation_id: str) -> None:
    Operation.objects.filter(pk=operation_id).update(next_poll_at=None)
    op = Operation.objects.get(pk=operation_id)
    poll_once(operation_id=op.pk, fence=op.fence)


@pytest.mark.django_db(transaction=True)
def test_mcp_tools_over_stdio(agent, profile):
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_server"],
        env=subprocess_env(POLLERDASH_TOKEN=agent.token),
        cwd=str(ROOT),
    )
    job = job_id("slow_success", polls=0)

    async def session() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS

            watched = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": job})
            assert not watched.is_error and watched.content[0].text.startswith("NOT DONE op_")
            operation_id = watched.structured_content["id"]
            assert watched.structured_content["object"] == "operation" and watched.structured_content["done"] is False

            waited = await client.call_tool("wait_job", {"operation_id": operation_id, "timeout_s": 1})
            assert waited.content[0].text.startswith("TIMED OUT WAITING") and operation_id in waited.content[0].text

            pending = asyncio.ensure_future(
                client.call_tool("wait_job", {"operation_id": operation_id, "timeout_s": 30})
            )
            await asyncio.sleep(0)
            await asyncio.to_thread(poll_now, operation_id)
            finished = await asyncio.wait_for(pending, timeout=20)
            assert finished.content[0].text.startswith("DONE (succeeded)")
            assert finished.structured_content["result"] is not None

            open_jobs = await client.call_tool("list_open_jobs", {})
            assert open_jobs.content[0].text.startswith("DONE (1 finished, not acknowledged)")
            assert [item["id"] for item in open_jobs.structured_content["data"]] == [operation_id]

            acked = await client.call_tool("ack_job", {"operation_id": operation_id})
            assert acked.content[0].text.startswith("DONE (succeeded)") and acked.structured_content["acknowledged_at"]

            human = await client.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("unknown_state")}
            )
            await asyncio.to_thread(poll_now, human.structured_content["id"])
            got = await client.call_tool("get_job", {"operation_id": human.structured_content["id"]})
            assert got.content[0].text.startswith("NEEDS HUMAN")
            cancelled = await client.call_tool("cancel_job", {"operation_id": human.structured_content["id"]})
            assert cancelled.content[0].text.startswith("DONE (closed)")

            missing = await client.call_tool("get_job", {"operation_id": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"})
            assert missing.is_error and missing.content[0].text.startswith("ERROR operation_not_found")
            refused = await client.call_tool("watch_job", {"provider": "nope", "provider_job_id": "x"})
            assert refused.is_error and "unknown_provider" in refused.content[0].text

    run_async(session())
