"""MCP at /mcp on the web process, spoken to with the official `mcp` client over Streamable HTTP.

The server is the real ASGI application under uvicorn (tests/api/conftest.py `live_api`); jobs are
polled by the real controller against the fake provider (`poll_now`), decisions taken through the
service. The Tasks extension's field names are pinned here (docs/DESIGN.md section 9, "MCP").
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from mcp.shared.exceptions import MCPError

from operations.cards.card import load_card
from operations.decisions.services import escalation_decide
from operations.models import AgentToken, Escalation, Operation
from operations.polls.controller import poll_once
from tests.api.conftest import run_async
from tests.api.mcp_support import (
    CreateTaskResult,
    mcp_client,
    raw_request,
    tasks_cancel,
    tasks_get,
    wire,
)
from tests.support import job_id, signed_in_now

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {"watch_job", "get_job", "wait_job", "list_open_jobs", "ack_job", "cancel_job"}
MODERN_HEADERS = {
    "MCP-Protocol-Version": "2026-07-28",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def poll_now(operation_id: str) -> None:
    Operation.objects.filter(pk=operation_id).update(next_poll_at=None)
    op = Operation.objects.get(pk=operation_id)
    poll_once(operation_id=op.pk, fence=op.fence)


def envelope(method: str, params: dict | None = None, *, tasks: bool = True, message_id: int = 1) -> dict:
    """A 2026-07-28 JSON-RPC request as a client without the SDK would post it."""
    capabilities = {"extensions": {"io.modelcontextprotocol/tasks": {}}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    return {"jsonrpc": "2.0", "id": message_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def post(url: str, token: str | None, body: object, **headers: str) -> httpx.Response:
    method = body.get("method", "") if isinstance(body, dict) else ""
    name = ((body.get("params") or {}) if isinstance(body, dict) else {}).get("taskId") or (
        (body.get("params") or {}).get("name") if isinstance(body, dict) else None
    )
    sent = {**MODERN_HEADERS, "Mcp-Method": method, **({"Mcp-Name": name} if name else {}), **headers}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{url}/mcp", content=json.dumps(body), headers=sent, timeout=30)


# --- the tools, as before, now over HTTP ------------------------------------------------------------------


def test_the_tools_over_streamable_http_with_a_client_without_the_tasks_extension(live_api, agent, profile):
    job = job_id("slow_success", polls=0)

    async def session() -> None:
        async with mcp_client(live_api.url, agent.token) as client:
            assert client.protocol_version == "2026-07-28"
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS

            watched = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": job})
            # No extension declared: today's synchronous answer, never a task.
            assert watched.result_type == "complete"
            assert not watched.is_error and watched.content[0].text.startswith("NOT DONE op_")
            operation_id = watched.structured_content["id"]
            assert watched.structured_content["object"] == "operation" and watched.structured_content["done"] is False

            waited = await client.call_tool("wait_job", {"operation_id": operation_id, "timeout_s": 1})
            assert waited.content[0].text.startswith("TIMED OUT WAITING") and operation_id in waited.content[0].text

            pending = asyncio.ensure_future(
                client.call_tool("wait_job", {"operation_id": operation_id, "timeout_s": 30})
            )
            await asyncio.sleep(0.2)
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
    # The same audit actor as the JSON API: the agent, by name.
    op = Operation.objects.get(provider_job_id=job)
    assert op.registered_by == "agent:report-bot"


def test_quotas_and_another_agents_watched_job_are_refused_like_the_api(
    live_api, agent, other_agent, profile, settings
):
    from operations.agents.registration import operation_register

    taken = job_id("cancel_ok")
    operation_register(
        provider_slug=profile.slug, provider_job_id=taken, registered_by="agent:other-bot", agent=other_agent.agent
    )
    settings.AGENT_MAX_OPEN_OPERATIONS = 1

    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            watched = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": taken})
            assert watched.is_error
            assert watched.content[0].text.startswith("ERROR job_already_watched: This provider job is already")
            assert "other-bot" not in watched.content[0].text and "op_" not in watched.content[0].text

            first = await client.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("x")}, allow_claimed=True
            )
            assert isinstance(first, CreateTaskResult)
            over = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": job_id("x")})
            assert over.is_error
            assert over.content[0].text.startswith("ERROR quota_exceeded: The open-operations quota is used up")
            assert over.structured_content["quota"] == "open_operations"
            assert over.structured_content["retry_after_s"] == 60

    run_async(session())
    assert Operation.objects.filter(agent=agent.agent).count() == 1


# --- the Tasks extension ----------------------------------------------------------------------------------


def test_watch_job_answers_a_task_that_tasks_get_follows_to_its_result(live_api, agent, profile, settings):
    job = job_id("slow_success", polls=1)

    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            assert client.server_capabilities.extensions == {"io.modelcontextprotocol/tasks": {}}
            created = await client.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job}, allow_claimed=True
            )
            assert isinstance(created, CreateTaskResult)
            seed = wire(created)
            op = await asyncio.to_thread(Operation.objects.get, provider_job_id=job)
            # The published field names, pinned.
            assert seed["resultType"] == "task" and seed["taskId"] == op.pk and seed["status"] == "working"
            assert seed["statusMessage"] == "watching: 0 of 12 status checks used, a check is due now"
            assert seed["createdAt"] == op.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            assert seed["lastUpdatedAt"] == op.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            retention = settings.RETENTION_DAYS * 86_400
            assert retention <= seed["ttlSeconds"] <= retention + 5 and seed["ttlMs"] == seed["ttlSeconds"] * 1000
            assert seed["pollIntervalMilliseconds"] == seed["pollIntervalMs"] == 1000
            assert re.fullmatch(r"s1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", seed["requestState"])
            assert not {"result", "error", "inputRequests"} & set(seed)

            # Durable before the answer: tasks/get resolves at once, with the state echoed.
            first = await tasks_get(client, seed["taskId"], seed["requestState"])
            assert first["resultType"] == "complete" and first["status"] == "working"
            # Without a requestState (the extension's published schema sends none) the token decides.
            assert (await tasks_get(client, seed["taskId"]))["status"] == "working"

            await asyncio.to_thread(poll_now, seed["taskId"])  # running; the next check is scheduled
            running = await tasks_get(client, seed["taskId"], first["requestState"])
            op = await asyncio.to_thread(Operation.objects.get, pk=seed["taskId"])
            next_check = op.next_poll_at.strftime("%Y-%m-%d %H:%M:%S UTC")
            assert running["statusMessage"] == f"watching: 1 of 12 status checks used, next check {next_check}"
            left_ms = (op.next_poll_at - timezone.now()).total_seconds() * 1000
            assert left_ms + 1000 - 2000 <= running["pollIntervalMilliseconds"] <= left_ms + 1000 + 100

            # wait_job on a job that is not done answers a task for the same operation.
            again = await client.session.call_tool("wait_job", {"operation_id": seed["taskId"]}, allow_claimed=True)
            assert isinstance(again, CreateTaskResult) and again.task_id == seed["taskId"]

            await asyncio.to_thread(poll_now, seed["taskId"])
            done = await tasks_get(client, seed["taskId"], running["requestState"])
            assert done["status"] == "completed" and done["statusMessage"] == "finished: succeeded"
            assert "pollIntervalMilliseconds" not in done
            # The task's result is what wait_job answers: a completed tool call with the Operation.
            assert done["result"]["content"][0]["text"].startswith(f"DONE (succeeded) {seed['taskId']}")
            assert done["result"]["structuredContent"]["status"] == "succeeded"
            assert done["result"]["isError"] is False

            # A job that is done gets the ordinary answer, even to a client of the extension.
            sync = await client.call_tool("wait_job", {"operation_id": seed["taskId"]})
            assert sync.content[0].text.startswith("DONE (succeeded)")

    run_async(session())


def test_a_task_waits_across_an_on_call_decision_in_the_dashboards_words(live_api, agent, profile):
    """Budget of 2 checks for a job that needs 4: pollerdash hands it to on-call, a person extends it
    (through the decision service), and the same task completes."""
    job = job_id("slow_success", polls=3)

    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            created = await client.session.call_tool(
                "watch_job",
                {"provider": profile.slug, "provider_job_id": job, "max_status_requests": 2},
                allow_claimed=True,
            )
            task_id = created.task_id
            state = wire(created)["requestState"]
            for _ in range(3):
                await asyncio.to_thread(poll_now, task_id)
            card = await asyncio.to_thread(Escalation.objects.get, operation_id=task_id, state="open")
            deciding = await tasks_get(client, task_id, state)
            assert deciding["status"] == "working"
            assert (
                deciding["statusMessage"] == f"waiting for an on-call decision: request budget spent (card {card.pk})"
            )
            assert deciding["pollIntervalMilliseconds"] == 30_000

            def decide() -> str:
                user = get_user_model().objects.create_user(username="alice", password="pw-alice")
                op = Operation.objects.select_related("provider").get(pk=task_id)
                options = load_card(escalation=card, operation=op, now=timezone.now()).options
                extend = next(option.id for option in options if option.id.startswith("extend:"))
                result = escalation_decide(
                    sign_in=signed_in_now(),
                    escalation_id=card.pk,
                    user=user,
                    option_id=extend,
                    card_version=card.version,
                )
                return result.outcome

            assert await asyncio.to_thread(decide) == "applied"
            extended = await tasks_get(client, task_id, deciding["requestState"])
            assert extended["status"] == "working" and extended["statusMessage"].startswith("watching: 2 of ")
            for _ in range(2):
                await asyncio.to_thread(poll_now, task_id)
            done = await tasks_get(client, task_id, extended["requestState"])
            assert done["status"] == "completed" and done["result"]["structuredContent"]["status"] == "succeeded"

    run_async(session())


def test_tasks_cancel_is_the_agents_cancel_and_acknowledges_any_id(live_api, agent, profile):
    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            created = await client.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}, allow_claimed=True
            )
            state = wire(created)["requestState"]
            acked = await tasks_cancel(client, created.task_id, state)
            assert set(acked) - {"_meta"} == {"resultType"} and acked["resultType"] == "complete"
            after = await tasks_get(client, created.task_id, state)
            assert after["status"] == "cancelled" and after["statusMessage"] == "cancelled by the agent"
            assert "result" not in after
            # Unknown ids, and a second cancel, are acknowledged alike (cooperative, nothing revealed).
            assert (await tasks_cancel(client, "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"))["resultType"] == "complete"
            assert (await tasks_cancel(client, created.task_id))["resultType"] == "complete"

    run_async(session())
    op = Operation.objects.get(agent=agent.agent)
    assert op.status == "closed" and op.error["code"] == "watch_cancelled" and op.cancel_reason == "tasks/cancel"


def test_tasks_result_and_tasks_list_do_not_exist_at_2026_07_28(live_api, agent, profile):
    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            created = await client.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}, allow_claimed=True
            )
            for method in ("tasks/result", "tasks/list"):
                with pytest.raises(MCPError) as refused:
                    await raw_request(client, method, created.task_id)
                assert refused.value.error.code == -32601, method

    run_async(session())


def test_another_agents_task_id_and_request_state_answer_exactly_like_an_unknown_task(
    live_api, agent, other_agent, profile
):
    async def errors(client, *calls) -> list[tuple]:
        found = []
        for task_id, state in calls:
            with pytest.raises(MCPError) as refused:
                await tasks_get(client, task_id, state)
            found.append((refused.value.error.code, refused.value.error.message, refused.value.error.data))
        return found

    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as mine:
            created = await mine.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}, allow_claimed=True
            )
            state = wire(created)["requestState"]
        async with mcp_client(live_api.url, other_agent.token, tasks=True) as theirs:
            other_task = await theirs.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}, allow_claimed=True
            )
            answers = await errors(
                theirs,
                (created.task_id, None),
                (created.task_id, state),
                ("op_01ARZ3NDEKTSV4RRFFQ69G5FAV", None),
                ("op_01ARZ3NDEKTSV4RRFFQ69G5FAV", state),
                # The other agent's own task with the first agent's state: bound to another task.
                (other_task.task_id, state),
            )
            assert set(answers) == {(-32602, "Failed to retrieve task: Task not found", None)}
            # Its cancel is acknowledged like any other, and changes nothing.
            assert (await tasks_cancel(theirs, created.task_id, state))["resultType"] == "complete"
            # The tools say the same as the JSON API: no such operation.
            got = await theirs.call_tool("get_job", {"operation_id": created.task_id})
            assert got.is_error and got.content[0].text.startswith("ERROR operation_not_found")

    run_async(session())
    assert Operation.objects.get(agent=agent.agent).status == "pending"


def test_an_altered_expired_replayed_or_foreign_request_state_is_refused(live_api, agent, profile, settings):
    from operations.api import mcp_state

    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            one = await client.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}, allow_claimed=True
            )
            two = await client.session.call_tool(
                "watch_job", {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}, allow_claimed=True
            )
            state = wire(one)["requestState"]
            version, body, tag = state.split(".")
            claims = json.loads(mcp_state._unb64(body))
            op = await asyncio.to_thread(Operation.objects.get, pk=one.task_id)
            digest = mcp_state.task_digest(task_id=op.pk, created_at=op.created_at)
            flipped = tag[:-1] + ("A" if tag[-1] != "A" else "B")
            # A body claiming another expiry, kept with the old tag.
            longer = mcp_state._b64(json.dumps({**claims, "e": claims["e"] + 10**6}, separators=(",", ":")).encode())
            expired = mcp_state.seal(
                agent_id=agent.agent.pk, task_id=op.pk, digest=digest, expires_at=int(timezone.now().timestamp()) - 1
            )
            ours = settings.SECRET_KEY
            settings.SECRET_KEY = "another-deployments-key-entirely"
            foreign = mcp_state.seal(agent_id=agent.agent.pk, task_id=op.pk, digest=digest, expires_at=claims["e"])
            settings.SECRET_KEY = ours
            for bad in (
                f"{version}.{body}.{flipped}",
                f"{version}.{longer}.{tag}",
                expired,
                foreign,
                "not-a-state",
                "s1." + "A" * 600,
            ):
                with pytest.raises(MCPError) as refused:
                    await tasks_get(client, one.task_id, bad)
                assert refused.value.error.message == "Failed to retrieve task: Task not found", bad
            # Replayed on another task of the same agent: bound to the task it was minted for.
            with pytest.raises(MCPError):
                await tasks_get(client, two.task_id, state)
            # A key rotation keeps states minted under the old key valid until they expire.
            settings.SECRET_KEY_FALLBACKS = [ours]
            settings.SECRET_KEY = "the-new-key-after-rotation"
            try:
                assert (await tasks_get(client, one.task_id, state))["status"] == "working"
            finally:
                settings.SECRET_KEY = ours
                settings.SECRET_KEY_FALLBACKS = []

    run_async(session())


def test_a_token_revoked_mid_task_gets_401_and_a_waiting_call_hands_out_nothing(live_api, agent, profile):
    async def session() -> None:
        async with mcp_client(live_api.url, agent.token, tasks=True) as client:
            created = await client.session.call_tool(
                "watch_job",
                {"provider": profile.slug, "provider_job_id": job_id("slow_success", polls=0)},
                allow_claimed=True,
            )
            state = wire(created)["requestState"]
            assert (await tasks_get(client, created.task_id, state))["status"] == "working"
        async with mcp_client(live_api.url, agent.token) as plain:
            waiting = asyncio.ensure_future(
                plain.call_tool("wait_job", {"operation_id": created.task_id, "timeout_s": 30})
            )
            await asyncio.sleep(0.5)
            await asyncio.to_thread(lambda: AgentToken.objects.update(revoked_at=timezone.now()))
            await asyncio.to_thread(poll_now, created.task_id)
            ended = await asyncio.wait_for(waiting, timeout=20)
            assert ended.is_error and ended.content[0].text.startswith("ERROR unauthenticated")
            assert created.task_id not in json.dumps(wire(ended))
        refused = post(
            live_api.url, agent.token, envelope("tasks/get", {"taskId": created.task_id, "requestState": state})
        )
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.json()["code"] == "unauthenticated" and created.task_id not in refused.text

    run_async(session())


def test_a_listen_stream_carries_task_status_and_ends_when_the_token_is_revoked(
    live_api, agent, other_agent, profile, settings
):
    settings.MCP_STREAM_RECHECK_S = 0.5
    from operations.agents.registration import operation_register

    mine = [
        operation_register(
            provider_slug=profile.slug,
            provider_job_id=job_id(s, polls=0),
            registered_by="agent:report-bot",
            agent=agent.agent,
        )
        for s in ("slow_success", "never_finishes")
    ]
    theirs = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="agent:other-bot",
        agent=other_agent.agent,
    )
    ids = [mine[0].pk, mine[1].pk, theirs.pk, "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"]
    body = envelope("subscriptions/listen", {"notifications": {"taskIds": ids}}, message_id=7)
    headers = {**MODERN_HEADERS, "Mcp-Method": "subscriptions/listen", "Authorization": f"Bearer {agent.token}"}
    events: list[dict] = []
    with httpx.stream("POST", f"{live_api.url}/mcp", content=json.dumps(body), headers=headers, timeout=30) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream"), (
            stream.read()
        )
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
                if len(events) == 3:
                    break
        ack, first, second = events
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        # Only the caller's own tasks are followed: another agent's id is left out like an unknown one.
        assert ack["params"]["notifications"]["taskIds"] == [mine[0].pk, mine[1].pk]
        assert {first["method"], second["method"]} == {"notifications/tasks/status"}
        assert [first["params"]["taskId"], second["params"]["taskId"]] == [mine[0].pk, mine[1].pk]
        assert first["params"]["status"] == "working" and "requestState" in first["params"]
        poll_now(mine[0].pk)
        for line in lines:
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
                break
        done = events[-1]["params"]
        assert done["taskId"] == mine[0].pk and done["status"] == "completed"
        assert done["result"]["structuredContent"]["status"] == "succeeded"
        # Revoked while the stream is open: it ends with an error instead of handing out more.
        AgentToken.objects.filter(agent=agent.agent).update(revoked_at=timezone.now())
        rest = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert rest[-1]["id"] == 7 and rest[-1]["error"]["code"] == -32001
    assert not [event for event in rest if event.get("method") == "notifications/tasks/status"]


def test_a_listen_stream_needs_the_extension_declared(live_api, agent, profile):
    from operations.agents.registration import operation_register

    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="agent:report-bot",
        agent=agent.agent,
    )
    body = envelope("subscriptions/listen", {"notifications": {"taskIds": [op.pk]}}, tasks=False)
    headers = {**MODERN_HEADERS, "Mcp-Method": "subscriptions/listen", "Authorization": f"Bearer {agent.token}"}
    with httpx.stream("POST", f"{live_api.url}/mcp", content=json.dumps(body), headers=headers, timeout=30) as stream:
        answer = json.loads(
            next(line for line in stream.iter_lines() if line.startswith(("data:", "{"))).removeprefix("data:")
        )
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


# --- 2025-11-25 experimental tasks ------------------------------------------------------------------------


def legacy(url: str, token: str, method: str, params: dict, message_id: int = 1) -> dict:
    """A 2025-11-25 request as its clients post it after the handshake (the SDK's own client checks a
    tools/call answer against CallToolResult, so a task-augmented call goes out raw)."""
    answer = httpx.post(
        f"{url}/mcp",
        json={"jsonrpc": "2.0", "id": message_id, "method": method, "params": params},
        headers={
            "MCP-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {token}",
        },
        timeout=60,
    )
    return answer.json()


def test_clients_of_the_2025_11_25_experimental_tasks_are_served_too(live_api, agent, profile):
    async def handshake() -> None:
        async with mcp_client(live_api.url, agent.token, mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            tasks = client.server_capabilities.tasks
            assert tasks is not None and tasks.cancel is not None and tasks.requests.tools.call is not None
            assert tasks.list is None
            listed = {tool.name: tool.execution for tool in (await client.list_tools()).tools}
            assert listed["watch_job"].task_support == listed["wait_job"].task_support == "optional"
            assert listed["get_job"] is None

    run_async(handshake())
    url, token = live_api.url, agent.token
    arguments = {"provider": profile.slug, "provider_job_id": job_id("slow_success", polls=0)}
    created = legacy(url, token, "tools/call", {"name": "watch_job", "arguments": arguments, "task": {"ttl": 60_000}})
    task = created["result"]["task"]
    assert task["status"] == "working" and task["ttl"] >= 86_400_000 and task["pollInterval"] == 1000
    assert "ttlSeconds" not in task and "requestState" not in task

    got = legacy(url, token, "tasks/get", {"taskId": task["taskId"]})["result"]
    assert got["taskId"] == task["taskId"] and got["status"] == "working" and "result" not in got

    # tasks/result blocks until the job is done, then answers what wait_job answers.
    async def blocking() -> dict:
        pending = asyncio.ensure_future(
            asyncio.to_thread(legacy, url, token, "tasks/result", {"taskId": task["taskId"]})
        )
        await asyncio.sleep(0.5)
        assert not pending.done()
        await asyncio.to_thread(poll_now, task["taskId"])
        return await asyncio.wait_for(pending, timeout=30)

    result = run_async(blocking())["result"]
    assert result["content"][0]["text"].startswith("DONE (succeeded)")
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}

    assert legacy(url, token, "tasks/list", {})["error"]["code"] == -32601
    other = legacy(
        url, token, "tools/call", {"name": "get_job", "arguments": {"operation_id": task["taskId"]}, "task": {}}
    )
    assert other["error"]["code"] == -32601
    refused = legacy(
        url,
        token,
        "tools/call",
        {"name": "watch_job", "arguments": {"provider": "nope", "provider_job_id": "x"}, "task": {}},
    )
    assert refused["error"]["code"] == -32602 and refused["error"]["message"].startswith("ERROR unknown_provider")

    arguments = {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}
    second = legacy(url, token, "tools/call", {"name": "watch_job", "arguments": arguments, "task": {}})["result"][
        "task"
    ]
    cancelled = legacy(url, token, "tasks/cancel", {"taskId": second["taskId"]})["result"]
    assert cancelled["taskId"] == second["taskId"] and cancelled["status"] == "cancelled"
    unknown = legacy(url, token, "tasks/get", {"taskId": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"})
    assert unknown["error"] == {"code": -32602, "message": "Failed to retrieve task: Task not found"}


# --- the HTTP edge ----------------------------------------------------------------------------------------


def test_no_token_or_an_unknown_one_is_a_401_with_www_authenticate(live_api, agent):
    for token in (None, "pdt_not-a-token", agent.token[:-2]):
        refused = post(live_api.url, token, envelope("tools/list"))
        assert refused.status_code == 401, token
        assert refused.headers["www-authenticate"] == 'Bearer realm="pollerdash"'
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["code"] == "unauthenticated"
        assert "no-store" in refused.headers["cache-control"]
    assert post(live_api.url, agent.token, envelope("tools/list")).status_code == 200


def test_a_token_in_the_query_string_is_refused_and_never_used(live_api, agent, profile):
    call = envelope(
        "tools/call", {"name": "watch_job", "arguments": {"provider": profile.slug, "provider_job_id": job_id("x")}}
    )
    for query in (f"access_token={agent.token}", f"token={agent.token}"):
        refused = httpx.post(
            f"{live_api.url}/mcp?{query}",
            content=json.dumps(call),
            headers={**MODERN_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "watch_job"},
            timeout=30,
        )
        assert refused.status_code == 400 and refused.json()["code"] == "unknown_field"
        assert agent.token not in refused.text
    # Even beside a good header: a URL with a token in it is not a request this server takes.
    refused = httpx.post(
        f"{live_api.url}/mcp?access_token={agent.token}",
        content=json.dumps(call),
        headers={
            **MODERN_HEADERS,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "watch_job",
            "Authorization": f"Bearer {agent.token}",
        },
        timeout=30,
    )
    assert refused.status_code == 400
    assert not Operation.objects.exists()


def test_a_forged_host_or_origin_is_refused_before_anything_runs(live_api, agent, settings):
    settings.SITE_URL = "https://pollerdash.example"
    forged_host = post(live_api.url, agent.token, envelope("tools/list"), Host="attacker.example")
    assert forged_host.status_code == 400 and forged_host.json()["code"] == "host_not_allowed"
    for origin in ("http://attacker.example", "null", "http://localhost.attacker.example:8000"):
        forged = post(live_api.url, agent.token, envelope("tools/list"), Origin=origin)
        assert forged.status_code == 403 and forged.json()["code"] == "origin_not_allowed", origin
    assert (
        post(live_api.url, agent.token, envelope("tools/list"), Origin="https://pollerdash.example").status_code == 200
    )
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.corp.example"]
    assert (
        post(live_api.url, agent.token, envelope("tools/list"), Origin="https://tools.corp.example").status_code == 200
    )


def test_a_huge_body_or_a_json_rpc_batch_is_refused_and_nothing_is_registered(live_api, agent, profile):
    big = envelope(
        "tools/call", {"name": "watch_job", "arguments": {"provider": profile.slug, "provider_job_id": "x" * 70_000}}
    )
    refused = post(live_api.url, agent.token, big)
    assert refused.status_code == 413 and refused.json()["code"] == "body_too_large"
    # Without a Content-Length (chunked), the SDK's own cap stops it at the same size.
    chunks = (part for part in [json.dumps(big).encode()[i : i + 8192] for i in range(0, 80_000, 8192)])
    streamed = httpx.post(
        f"{live_api.url}/mcp",
        content=chunks,
        headers={**MODERN_HEADERS, "Mcp-Method": "tools/call", "Authorization": f"Bearer {agent.token}"},
        timeout=30,
    )
    assert streamed.status_code == 413
    batch = [
        envelope(
            "tools/call",
            {"name": "watch_job", "arguments": {"provider": profile.slug, "provider_job_id": job_id("x")}},
            message_id=i,
        )
        for i in range(200)
    ]
    assert post(live_api.url, agent.token, batch).status_code == 413
    refused = post(live_api.url, agent.token, batch[:5])
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600
    assert not Operation.objects.exists()


def test_every_answer_is_no_store(live_api, agent):
    answers = [
        post(live_api.url, agent.token, envelope("tools/list")),
        post(live_api.url, agent.token, envelope("tasks/get", {"taskId": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"})),
        post(live_api.url, agent.token, envelope("no/such/method")),
    ]
    for answer in answers:
        assert answer.headers["cache-control"] == "no-store", answer.text


def test_the_pinned_sdk_keeps_what_the_server_relies_on():
    """build_server reaches into two private attributes of mcp 2.3.0 (operations/api/mcp.py)."""
    from operations.api.mcp import build_server

    server = build_server()
    assert {tool.name for tool in server._tool_manager.list_tools()} == TOOLS
    for method in ("tasks/get", "tasks/cancel", "tasks/update", "tasks/result", "subscriptions/listen"):
        assert server._lowlevel_server.get_request_handler(method) is not None, method
    assert server._lowlevel_server.get_request_handler("tasks/list") is None


def test_the_old_stdio_command_refuses_to_run_and_says_where_mcp_went():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="pollerdash-mcp"):
        call_command("mcp_server")
    with pytest.raises(CommandError, match="/mcp"):
        call_command("mcp_server", "--agent", "report-bot")


def test_a_deadline_sooner_than_the_next_check_shortens_the_poll_interval(make_operation):
    from operations.api.mcp_task_view import poll_interval_ms

    now = timezone.now()
    op = make_operation(job_id("never_finishes"))
    op.next_poll_at = now + timedelta(seconds=20)
    assert poll_interval_ms(op, now=now) == 21_000
    op.deadline_at = now + timedelta(seconds=5)
    assert poll_interval_ms(op, now=now) == 6_000
    op.next_poll_at = now + timedelta(milliseconds=10)
    assert poll_interval_ms(op, now=now) == 1_010
    op.next_poll_at = now + timedelta(hours=2)
    op.deadline_at = now + timedelta(hours=3)
    assert poll_interval_ms(op, now=now) == 60_000
    op.next_poll_at = now - timedelta(seconds=1)
    assert poll_interval_ms(op, now=now) == 1_000
    op.status = "needs_attention"
    assert poll_interval_ms(op, now=now) == 30_000
    op.status = "succeeded"
    assert poll_interval_ms(op, now=now) is None


def test_a_database_outage_is_answered_as_the_api_answers_it_never_a_500(live_api, agent, profile, monkeypatch):
    from django.db import OperationalError

    import operations.api.mcp_fast as mcp_fast
    import operations.api.mcp_tasks as mcp_tasks

    def down(**kwargs: object) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(mcp_tasks, "load_task", down)
    answer = post(live_api.url, agent.token, envelope("tasks/get", {"taskId": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"}))
    assert answer.json()["error"]["code"] == -32603
    assert answer.json()["error"]["data"] == {"code": "unavailable", "retry_after_s": 5}
    # The token check (with a plain tasks/get's read of its task) is the endpoint's, before the MCP server.
    monkeypatch.setattr(mcp_fast, "authenticate_and_load", down)
    for body in (envelope("tools/list"), envelope("tasks/get", {"taskId": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"})):
        refused = post(live_api.url, agent.token, body)
        assert refused.status_code == 503 and refused.json()["code"] == "unavailable"
        assert refused.headers["retry-after"] == "5"


def test_only_post_is_served_and_no_stream_is_held_open(live_api, agent):
    for method in ("GET", "DELETE", "PUT"):
        for version in ("2025-11-25", "2026-07-28", None):
            headers = {"Authorization": f"Bearer {agent.token}", "Accept": "text/event-stream, application/json"}
            if version:
                headers["MCP-Protocol-Version"] = version
            answer = httpx.request(method, f"{live_api.url}/mcp", headers=headers, timeout=10)
            assert answer.status_code == 405 and answer.headers["allow"] == "POST", (method, version)
            assert answer.json()["code"] == "method_not_allowed"


def test_the_mcp_name_header_must_name_the_task_the_body_asks_about(live_api, agent, profile):
    from operations.agents.registration import operation_register

    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="agent:report-bot",
        agent=agent.agent,
    )
    body = envelope("tasks/get", {"taskId": op.pk})
    assert post(live_api.url, agent.token, body).json()["result"]["status"] == "working"
    crossed = post(live_api.url, agent.token, body, **{"Mcp-Name": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"})
    assert crossed.json()["error"]["code"] == -32020
