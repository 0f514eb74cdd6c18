"""MCP with real processes: two uvicorn web processes behind one port (a TCP balancer), a `qcluster`
and a `dispatch_polls`, the fake provider in its own process, the official `mcp` client over
Streamable HTTP. Nothing about a task lives in one web process: kill one while the task waits on a
person and the other answers `tasks/get`; the worked example (examples/mcp_agent_loop.py) runs
against the same set-up, across a decision taken through the service."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from queue import Empty, Queue

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from operations.agents.identities import agent_token_issue
from operations.cards.card import load_card
from operations.decisions.services import escalation_decide
from operations.models import Escalation, Operation, ProcessHeartbeat
from tests.api.mcp_support import CreateTaskResult, TasksClient, tasks_get, wire
from tests.integration.support import ROOT, Processes, TcpBalancer, free_port, wait_for_web, wait_until
from tests.support import job_id, signed_in_now

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def web(processes: Processes, make_profile) -> Iterator[tuple[TcpBalancer, list, object]]:
    """Two web processes behind a balancer, a worker and a dispatcher; a profile that polls every second
    and whose extension paces its checks a few seconds apart (for jobs registered with a short deadline)."""
    profile = make_profile(
        base_delay_s=0.5, max_delay_s=1, jitter_floor=0.5, extension_options=[{"minutes": 1, "checks": 20}]
    )
    ports = [free_port(), free_port()]
    webs = [processes.start("web", PORT=port) for port in ports]
    processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    for port in ports:
        wait_for_web(port, processes=processes)
    wait_until(
        lambda: ProcessHeartbeat.objects.filter(kind="dispatcher").exists(),
        timeout=60,
        what="the dispatcher's first heartbeat",
        processes=processes,
    )
    balancer = TcpBalancer(ports)
    try:
        yield balancer, webs, profile
    finally:
        balancer.close()


def soon() -> str:
    """A deadline 20 s ahead: the extension's window (and so its spacing) is short."""
    return (timezone.now() + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide_extend(operation_id: str) -> None:
    """An on-call person extends the card (+4 checks), through the decision service."""
    card = Escalation.objects.get(operation_id=operation_id, state="open")
    op = Operation.objects.select_related("provider").get(pk=operation_id)
    extend = next(
        o.id for o in load_card(escalation=card, operation=op, now=timezone.now()).options if o.id.startswith("extend:")
    )
    user = get_user_model().objects.create_user(username="alice", password="pw-alice")
    result = escalation_decide(
        sign_in=signed_in_now(), escalation_id=card.pk, user=user, option_id=extend, card_version=card.version
    )
    assert result.outcome == "applied"


def test_any_web_process_answers_a_task_and_one_can_die_while_it_waits_on_a_person(web, processes):
    balancer, webs, profile = web
    token = agent_token_issue(name="report-bot").token
    job = job_id("slow_success", polls=3)

    async def scenario() -> None:
        # A new connection per request: the balancer hands consecutive requests to either process.
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30, read=90),
            limits=httpx2.Limits(max_keepalive_connections=0),
        )
        async with (
            http,
            Client(
                streamable_http_client(f"{balancer.url}/mcp", http_client=http), extensions=[TasksClient()]
            ) as client,
        ):
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} >= {"watch_job", "wait_job"}
            created = await client.session.call_tool(
                "watch_job",
                {"provider": profile.slug, "provider_job_id": job, "max_status_requests": 2, "deadline": soon()},
                allow_claimed=True,
            )
            assert isinstance(created, CreateTaskResult)
            task_id, state = created.task_id, wire(created)["requestState"]

            async def deciding() -> dict:
                nonlocal state
                task = await tasks_get(client, task_id, state)
                state = task["requestState"]
                return task if task["statusMessage"].startswith("waiting for an on-call decision") else {}

            task = await poll_until(deciding, timeout=60)
            card = await asyncio.to_thread(Escalation.objects.get, operation_id=task_id, state="open")
            assert task["statusMessage"] == f"waiting for an on-call decision: request budget spent (card {card.pk})"
            assert set(balancer.served) == set(balancer.backends), "both processes answered"

            # One web process dies while the task waits on a person; the other answers everything.
            webs[0].kill_group()
            served_before = len(balancer.served)
            for _ in range(4):
                task = await tasks_get(client, task_id, state)
                state = task["requestState"]
                assert task["status"] == "working"
            assert set(balancer.served[served_before:]) == {balancer.backends[1]}

            await asyncio.to_thread(decide_extend, task_id)

            async def completed() -> dict:
                nonlocal state
                task = await tasks_get(client, task_id, state)
                state = task["requestState"]
                return task if task["status"] != "working" else {}

            done = await poll_until(completed, timeout=60)
            assert done["status"] == "completed"
            assert done["result"]["content"][0]["text"].startswith(f"DONE (succeeded) {task_id}")

    asyncio.run(scenario())
    assert "Traceback" not in webs[1].log(), webs[1].log()[-3000:]


async def poll_until(check, *, timeout: float) -> dict:
    async def loop() -> dict:
        while not (found := await check()):
            await asyncio.sleep(0.5)
        return found

    return await asyncio.wait_for(loop(), timeout=timeout)


def test_the_worked_example_polls_a_task_across_a_decision_and_prints_the_result(web, processes):
    balancer, _webs, profile = web
    token = agent_token_issue(name="example-bot").token
    job = job_id("slow_success", polls=3)
    example = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "examples" / "mcp_agent_loop.py"),
            "--provider",
            profile.slug,
            "--job",
            job,
            "--max-status-requests",
            "2",
            "--deadline",
            soon(),
        ],
        env={"PATH": os.environ["PATH"], "POLLERDASH_URL": balancer.url, "POLLERDASH_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: Queue[str] = Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in example.stdout], daemon=True).start()
    seen: list[str] = []

    def next_line(timeout: float = 60) -> str:
        try:
            line = lines.get(timeout=timeout)
        except Empty:
            raise AssertionError(f"the example printed nothing more: {seen}\n{processes.logs()}") from None
        seen.append(line.rstrip())
        return line

    try:
        while "waiting for an on-call decision" not in next_line():
            pass
        operation_id = Operation.objects.get(provider_job_id=job).pk
        card = Escalation.objects.get(operation_id=operation_id, state="open")
        assert seen[0].startswith(f"task {operation_id}: working - watching: 0 of 2 status checks used")
        assert seen[-1] == (
            f"task {operation_id}: working - waiting for an on-call decision: request budget spent (card {card.pk})"
        )
        decide_extend(operation_id)
        assert example.wait(timeout=90) == 0, seen
        while not lines.empty():
            next_line()
    finally:
        if example.poll() is None:
            example.kill()
    assert any(line.startswith(f"DONE (succeeded) {operation_id}") for line in seen), seen
    assert any(line.startswith("result: {") and "'result.output_url'" in line for line in seen), seen
    assert Operation.objects.get(pk=operation_id).acknowledged_at is not None
