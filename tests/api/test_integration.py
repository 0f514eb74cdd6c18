"""The client against a running pollerdash: uvicorn, qcluster, dispatch_polls and the fake provider,
each a real process on the test database. Profile delays are short so this takes seconds."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from pollerdash.client import PollerdashClient, WebhookVerifier
from tests.api.support import Receiver
from tests.integration.support import FAST_ENV, Proc, Processes, ProviderProcess, subprocess_database_env, wait_until
from tests.support import CANARY, job_id

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[ProviderProcess]:
    provider = ProviderProcess()
    try:
        yield provider
    finally:
        provider.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A callback receiver; the processes allow exactly its host and port (CALLBACK_ALLOWED_HOSTS)."""
    found = Receiver()
    yield found
    found.stop()


@pytest.fixture
def running(
    transactional_db: None, fake_provider: ProviderProcess, receiver: Receiver, pgbouncer: Any, tmp_path: Path
) -> Iterator[str]:
    """uvicorn + qcluster + dispatch_polls on the test database; yields the web URL."""
    env = {
        **os.environ,
        **subprocess_database_env(pgbouncer),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "test-only-not-secret"),
        "PROVIDER_FAKE_TOKEN": CANARY,
        "CALLBACK_ALLOWED_HOSTS": f"127.0.0.1:{receiver.port}",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        "Q_WORKERS": "2",
        **FAST_ENV,
    }
    env.pop("DEBUG", None)
    group = Processes(log_dir=tmp_path, base_env=env)
    port = _free_port()
    log_path = tmp_path / "web.log"
    with log_path.open("wb") as log:
        web = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "pollerdash.asgi:application", "--host", "127.0.0.1"]
            + ["--port", str(port), "--no-access-log"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    group.started.append(Proc("web", web, log_path))
    group.start("qcluster")
    group.start("dispatcher")
    url = f"http://127.0.0.1:{port}"

    def web_up() -> bool:
        try:
            return httpx.get(f"{url}/api/v1/openapi.json", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(web_up, timeout=30, what="uvicorn to answer", processes=group)
        yield url
    finally:
        group.stop_all()
        leaked = [p.log_path.name for p in group.started if CANARY in p.log()]
        assert not leaked, f"the canary credential leaked into process output: {leaked}"


def test_await_operation_against_running_processes(running, receiver, agent, make_profile):
    profile = make_profile(base_delay_s=0.3, max_delay_s=0.5, jitter_floor=0.5)
    with PollerdashClient(running, agent.token) as client:
        ops = {
            "slow success": client.register(profile.slug, job_id("slow_success", polls=3), callback_url=receiver.url),
            "late failure": client.register(profile.slug, job_id("late_failure", polls=2)),
            "never finishes": client.register(profile.slug, job_id("never_finishes")),
            "unknown state": client.register(profile.slug, job_id("unknown_state", value="needs_payment")),
        }
        waits = {"slow success": 30, "late failure": 30, "never finishes": 2, "unknown state": 30}
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(client.await_operation, op["id"], waits[name]) for name, op in ops.items()}
            results = {name: future.result(timeout=60) for name, future in futures.items()}
        for name, op in ops.items():
            assert results[name].operation_id == op["id"] == results[name].operation["id"], name
        assert results["slow success"].outcome == "succeeded"
        assert results["slow success"].operation["poll"]["count"] == 4
        assert results["late failure"].outcome == "failed"
        assert results["late failure"].operation["error"]["code"] == "provider_failed"
        assert results["never finishes"].outcome == "timed_out"
        assert results["never finishes"].operation["agent_hint"].startswith("NOT DONE.")
        assert results["unknown state"].outcome == "needs_attention"
        assert results["unknown state"].operation["escalation"]["reason"] == "unknown_state"

        # The completion callback went out through the real dispatcher and worker, signed.
        wait_until(lambda: receiver.requests, timeout=20, what="the completion callback")
        (delivery,) = receiver.requests
        event = WebhookVerifier(agent.webhook_secret).verify(delivery["body"], delivery["headers"])
        assert event["type"] == "operation.completed"
        assert event["data"]["operation_id"] == ops["slow success"]["id"]
        assert json.loads(delivery["body"])["data"]["status"] == "succeeded"
