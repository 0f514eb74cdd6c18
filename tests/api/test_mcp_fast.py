"""The direct answers of the two reads agents repeat most are the full stack's answers, byte for byte.

`tasks/get` (operations/api/mcp_fast.py, instead of the MCP SDK) and getOperation (the threadless
handler's direct route in operations/api/asgi.py, instead of Django's request, URL resolution and
django-ninja): each request is sent twice to the same live server, once with the direct answer
enabled and once with it disabled, at one frozen instant, and the two HTTP answers (status,
headers, body) must be identical. Refusals (another agent, a revoked token, an altered state, an
unknown id) must not come from the direct answer at all, and still answer as they did.
"""

from __future__ import annotations

import json

import httpx
import pytest
from django.utils import timezone

from operations.api import asgi as api_asgi
from operations.api import mcp_fast
from operations.models import AgentToken
from tests.api.test_mcp import envelope, post
from tests.support import job_id

pytestmark = pytest.mark.django_db(transaction=True)


class Direct:
    """Switch a direct answer off and on, and count the requests it answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
        self.enabled, self.answered = True, 0
        original = getattr(module, name)
        failed = False if name == "answer_directly" else None

        async def counted_async(*args: object, **kwargs: object) -> object:
            if not self.enabled:
                return failed
            result = await original(*args, **kwargs)
            self.answered += result not in (None, False)
            return result

        def counted(*args: object, **kwargs: object) -> object:
            if not self.enabled:
                return failed
            result = original(*args, **kwargs)
            self.answered += result not in (None, False)
            return result

        monkeypatch.setattr(module, name, counted_async if name == "answer_directly" else counted)

    def both(self, send: object) -> tuple[httpx.Response, httpx.Response, int]:
        """The answer with the direct path, the answer without it, and how many it answered."""
        before = self.answered
        self.enabled = True
        direct = send()
        self.enabled = False
        full = send()
        self.enabled = True
        return direct, full, self.answered - before


def same(direct: httpx.Response, full: httpx.Response) -> None:
    assert direct.status_code == full.status_code
    headers = [(k, v) for k, v in direct.headers.multi_items() if k != "date"]
    assert headers == [(k, v) for k, v in full.headers.multi_items() if k != "date"]
    assert direct.content == full.content


def register(agent: object, profile: object, scenario: str = "never_finishes") -> str:
    from operations.agents.registration import operation_register

    return operation_register(
        provider_slug=profile.slug, provider_job_id=job_id(scenario), registered_by="agent:bot", agent=agent.agent
    ).pk


def test_tasks_get_of_a_running_task_is_the_sdks_answer_and_every_refusal_still_the_sdks(
    live_api, agent, other_agent, profile, clock, monkeypatch
):
    direct = Direct(monkeypatch, mcp_fast, "answer")
    task_id = register(agent, profile)
    first, full, answered = direct.both(
        lambda: post(live_api.url, agent.token, envelope("tasks/get", {"taskId": task_id}))
    )
    same(first, full)
    assert answered == 1 and first.json()["result"]["status"] == "working"
    state = first.json()["result"]["requestState"]
    altered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")

    served = {
        "with its requestState": envelope("tasks/get", {"taskId": task_id, "requestState": state}),
        "with a string id": envelope("tasks/get", {"taskId": task_id, "requestState": state}) | {"id": "seven"},
    }
    for name, body in served.items():
        one, other, answered = direct.both(lambda body=body: post(live_api.url, agent.token, body))
        same(one, other)
        assert answered == 1 and one.json()["result"]["taskId"] == task_id, name

    refused = {
        "an altered requestState": (
            agent.token,
            envelope("tasks/get", {"taskId": task_id, "requestState": altered}),
            {},
        ),
        "another agent's token": (
            other_agent.token,
            envelope("tasks/get", {"taskId": task_id, "requestState": state}),
            {},
        ),
        "an unknown task": (agent.token, envelope("tasks/get", {"taskId": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"}), {}),
        "another task in Mcp-Name": (
            agent.token,
            envelope("tasks/get", {"taskId": task_id}),
            {"Mcp-Name": "op_01ARZ3NDEKTSV4RRFFQ69G5FAV"},
        ),
        "no extension declared": (agent.token, envelope("tasks/get", {"taskId": task_id}, tasks=False), {}),
        "a batch": (
            agent.token,
            [envelope("tasks/get", {"taskId": task_id})],
            {"Mcp-Method": "tasks/get", "Mcp-Name": task_id},
        ),
    }
    for name, (token, body, headers) in refused.items():
        one, other, answered = direct.both(lambda t=token, b=body, h=headers: post(live_api.url, t, b, **h))
        same(one, other)
        assert answered == 0, name

    AgentToken.objects.filter(agent=agent.agent).update(revoked_at=timezone.now())
    one, other, answered = direct.both(lambda: post(live_api.url, agent.token, served["with its requestState"]))
    same(one, other)
    assert one.status_code == 401 and answered == 0 and task_id not in one.text


def test_tasks_get_of_a_finished_task_is_left_to_the_sdk(live_api, agent, profile, clock, monkeypatch):
    from operations.agents import services

    direct = Direct(monkeypatch, mcp_fast, "answer")
    task_id = register(agent, profile)
    services.operation_cancel_by_agent(agent=agent.agent, operation_id=task_id, reason="test")
    one, other, answered = direct.both(
        lambda: post(live_api.url, agent.token, envelope("tasks/get", {"taskId": task_id}))
    )
    same(one, other)
    assert answered == 0 and one.json()["result"]["status"] == "cancelled"


def test_get_operation_is_the_views_answer_and_every_refusal_still_the_views(
    live_api, agent, other_agent, profile, clock, monkeypatch
):
    direct = Direct(monkeypatch, api_asgi, "answer_directly")
    operation_id = register(agent, profile)
    path = f"{live_api.url}/api/v1/operations/{operation_id}"

    def get(token: str | None, url: str = path, **headers: str) -> httpx.Response:
        sent = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(url, headers={**sent, **headers}, timeout=30)

    one, other, answered = direct.both(lambda: get(agent.token))
    same(one, other)
    assert answered == 1 and one.status_code == 200 and json.loads(one.content)["id"] == operation_id
    assert one.headers["cache-control"] == "no-store" and int(one.headers["content-length"]) == len(one.content)

    refused = {
        "another agent's operation": lambda: get(other_agent.token),
        "no token": lambda: get(None),
        "an unknown token": lambda: get("pdt_" + "x" * 43),
        "a query string": lambda: get(agent.token, f"{path}?fields=id"),
        "a forged Host": lambda: get(agent.token, Host="evil.example"),
        "an unknown operation": lambda: get(
            agent.token, f"{live_api.url}/api/v1/operations/op_01ARZ3NDEKTSV4RRFFQ69G5FAV"
        ),
    }
    for name, send in refused.items():
        one, other, answered = direct.both(send)
        same(one, other)
        assert answered == 0 and one.status_code in (400, 401, 404), name

    AgentToken.objects.filter(agent=agent.agent).update(revoked_at=timezone.now())
    one, other, answered = direct.both(lambda: get(agent.token))
    same(one, other)
    assert one.status_code == 401 and answered == 0
