"""Fixtures for the agent API: agents with tokens, an authenticated test client, a live uvicorn.

The live server runs the real ASGI application (pollerdash.asgi) under uvicorn in a thread of the
test process, on an ephemeral port, so it shares the test database; tests that use it need
committed data (`transactional_db`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.test import Client

from tests.support import job_id


@dataclass
class AgentCredentials:
    agent: object
    token: str
    webhook_secret: str


def _issue(name: str) -> AgentCredentials:
    from operations.agents.identities import agent_token_issue

    issued = agent_token_issue(name=name)
    assert issued.webhook_secret is not None
    return AgentCredentials(agent=issued.agent, token=issued.token, webhook_secret=issued.webhook_secret)


@pytest.fixture
def agent(db: None) -> AgentCredentials:
    return _issue("report-bot")


@pytest.fixture
def other_agent(db: None) -> AgentCredentials:
    return _issue("other-bot")


class ApiClient:
    """Django's test client with the agent's bearer token and JSON helpers."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **headers: str) -> object:
        return self.client.get(path, headers={**self.headers, **headers})

    def post(
        self,
        path: str,
        body: object = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        **headers: str,
    ) -> object:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        return self.client.generic("POST", path, data, content_type=content_type, headers={**self.headers, **headers})

    def register(self, **body: object) -> object:
        return self.post("/api/v1/operations", body)


@pytest.fixture
def api(agent: AgentCredentials) -> ApiClient:
    return ApiClient(agent.token)


@pytest.fixture
def other_api(other_agent: AgentCredentials) -> ApiClient:
    return ApiClient(other_agent.token)


@pytest.fixture
def register(api: ApiClient, profile: object) -> Callable[..., dict]:
    """Register a job through the API and return the Operation object (asserts 202)."""

    def make(scenario: str = "slow_success", **body: object) -> dict:
        params = body.pop("params", {})
        body.setdefault("provider", profile.slug)
        body.setdefault("provider_job_id", job_id(scenario, **params))
        response = api.register(**body)
        assert response.status_code == 202, response.content
        return response.json()

    return make


@pytest.fixture(scope="session", autouse=True)
def _close_api_db_threads(django_db_setup: None, django_db_blocker: object) -> Iterator[None]:
    """The API's database threads hold connections: close them before the test database goes."""
    yield
    from operations.api.wait import shutdown_db_threads

    shutdown_db_threads()


@dataclass
class LiveServer:
    url: str
    server: object
    thread: threading.Thread


@pytest.fixture(scope="session")
def live_api(django_db_setup: None, _close_api_db_threads: None) -> Iterator[LiveServer]:
    """uvicorn serving pollerdash.asgi:application on 127.0.0.1 and an ephemeral port."""
    import uvicorn

    from pollerdash.asgi import application

    config = uvicorn.Config(application, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}", server=server, thread=thread)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        # Django's ASGI handler gives each request a short-lived thread with its own database
        # connection; collecting those threads' state closes the connections before the test
        # database is dropped.
        gc.collect()


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a pollerdash process that must use this test run's database."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        url = f"sqlite:///{db['NAME']}"
    else:
        url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "SECRET_KEY": settings.SECRET_KEY, "LOG_LEVEL": "WARNING", **extra}


def run_async(coro: object) -> object:
    return asyncio.run(coro)


def wait_until(predicate: Callable[[], object], *, timeout: float = 10.0, interval: float = 0.02) -> object:
    """Poll a condition with a deadline (never a bare sleep standing in for time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within the deadline")
        time.sleep(interval)
