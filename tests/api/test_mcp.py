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

            # The next step is named in this server's tools, never as HTTP calls an MCP agent cannot make.
            assert "wait_job" in waited.content[0].text and "/api/v1" not in waited.content[0].text
            assert "ack_job" in finished.content[0].text and finished.content[0].text.count("DONE") == 1
            assert "get_job" in got.content[0].text and "/api/v1" not in got.content[0].text

            # Arguments are checked like the JSON API's fields: misspelt ones and booleans are refused.
            typo = await client.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("slow_success"), "deadlne": "x"}
            )
            assert typo.is_error and "deadlne" in typo.content[0].text
            boolean = await client.call_tool(
                "watch_job",
                {"provider": profile.slug, "provider_job_id": job_id("slow_success"), "max_status_requests": True},
            )
            assert boolean.is_error and "max_status_requests" in boolean.content[0].text
            clamped = await client.call_tool("wait_job", {"operation_id": operation_id, "timeout_s": 9999})
            assert not clamped.is_error and "Waited at most 50 s" in clamped.content[0].text
            too_long = await client.call_tool("wait_job", {"operation_id": operation_id, "timeout_s": 10000})
            assert too_long.is_error and too_long.content[0].text.startswith("ERROR invalid_timeout")
            no_rows = await client.call_tool("list_open_jobs", {"limit": 0})
            assert no_rows.is_error and no_rows.content[0].text.startswith("ERROR invalid_field")

            missing = await client.call_tool("get_job", {"operation_id": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"})
            assert missing.is_error and missing.content[0].text.startswith("ERROR operation_not_found")
            refused = await client.call_tool("watch_job", {"provider": "nope", "provider_job_id": "x"})
            assert refused.is_error and "unknown_provider" in refused.content[0].text

    run_async(session())


def test_the_mcp_server_refuses_to_start_without_a_secret_key(settings, monkeypatch):
    from django.core.management import CommandError, call_command

    settings.SECRET_KEY = ""
    monkeypatch.setenv("POLLERDASH_TOKEN", "pdt_whatever")
    with pytest.raises(CommandError, match="set SECRET_KEY"):
        call_command("mcp_server")


@pytest.mark.django_db(transaction=True)
def test_mcp_refuses_over_quota_and_jobs_another_client_watches_like_the_api(agent, other_agent, profile):
    from operations.registration import operation_register

    taken = job_id("cancel_ok")
    operation_register(
        provider_slug=profile.slug, provider_job_id=taken, registered_by="agent:other-bot", agent=other_agent.agent
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_server"],
        env=subprocess_env(POLLERDASH_TOKEN=agent.token, AGENT_MAX_OPEN_OPERATIONS="1"),
        cwd=str(ROOT),
    )

    async def session() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            watched = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": taken})
            assert watched.is_error
            assert watched.content[0].text.startswith("ERROR job_already_watched: This provider job is already")
            assert "other-bot" not in watched.content[0].text and "op_" not in watched.content[0].text

            first = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": job_id("x")})
            assert not first.is_error
            over = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": job_id("x")})
            assert over.is_error
            assert over.content[0].text.startswith("ERROR quota_exceeded: The open-operations quota is used up")
            assert over.structured_content["quota"] == "open_operations"
            assert over.structured_content["retry_after_s"] == 60

    run_async(session())
    assert Operation.objects.filter(agent=agent.agent).count() == 1
