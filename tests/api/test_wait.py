"""The bounded wait, for real: uvicorn serving the ASGI app, the operation changing in another thread."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from django.conf import settings

from operations.api import wait as api_wait
from operations.models import Operation
from operations.polls.controller import poll_once
from tests.api.conftest import run_async, wait_until
from tests.support import job_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def http(live_api, agent):
    with httpx.Client(base_url=live_api.url, headers={"Authorization": f"Bearer {agent.token}"}, timeout=70) as client:
        yield client


@pytest.fixture
def create(http, profile):
    def make(scenario: str, **params: object) -> dict:
        response = http.post(
            "/api/v1/operations", json={"provider": profile.slug, "provider_job_id": job_id(scenario, **params)}
        )
        assert response.status_code == 202, response.text
        return response.json()

    return make


def poll_now(operation_id: str) -> None:
    """One poll, due now (the dispatcher's part, without waiting for the backoff)."""
    Operation.objects.filter(pk=operation_id).update(next_poll_at=None)
    op = Operation.objects.get(pk=operation_id)
    poll_once(operation_id=op.pk, fence=op.fence)


def in_background(fn, *args) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    return thread


def finish_when_parked(operation_id: str, marks: dict) -> None:
    wait_until(lambda: api_wait.open_waits() >= 1)
    poll_now(operation_id)
    marks["finished"] = time.monotonic()


def test_wait_times_out_with_the_id_and_timed_out_true(http, create):
    created = create("never_finishes")
    started = time.monotonic()
    response = http.get(f"/api/v1/operations/{created['id']}/wait", params={"timeout_s": "1"})
    elapsed = time.monotonic() - started
    body = response.json()
    assert response.status_code == 200 and body["object"] == "wait_result"
    assert body["operation_id"] == created["id"] == body["operation"]["id"]
    assert body["timed_out"] is True and body["done"] is False
    assert (body["requested_timeout_s"], body["applied_timeout_s"], body["waited_s"]) == (1, 1, 1)
    assert body["operation"]["agent_hint"].startswith("NOT DONE.")
    assert response.headers["Retry-After"] == str(body["operation"]["retry_after_s"])
    assert 1.0 <= elapsed < 5


@pytest.mark.parametrize(
    ("scenario", "params", "status", "done"),
    [("slow_success", {"polls": 0}, "succeeded", True), ("unknown_state", {}, "needs_attention", False)],
)
def test_wait_returns_within_a_second_when_the_operation_finishes_or_needs_a_human(
    http, create, scenario, params, status, done
):
    created = create(scenario, **params)
    marks: dict[str, float] = {}
    worker = in_background(finish_when_parked, created["id"], marks)
    response = http.get(f"/api/v1/operations/{created['id']}/wait", params={"timeout_s": "30"})
    returned = time.monotonic()
    worker.join(timeout=10)
    body = response.json()
    assert body["timed_out"] is False and body["done"] is done and body["operation"]["status"] == status
    assert returned - marks["finished"] < 1.0, f"returned {returned - marks['finished']:.2f} s after the change"
    assert body["waited_s"] < 10


def test_wait_on_a_finished_operation_returns_at_once_and_reports_the_clamp(http, create):
    created = create("slow_success", polls=0)
    poll_now(created["id"])
    started = time.monotonic()
    response = http.get(f"/api/v1/operations/{created['id']}/wait", params={"timeout_s": "3600"})
    body = response.json()
    assert time.monotonic() - started < 5
    assert "Retry-After" not in response.headers  # done: there is nothing to ask again about
    assert (body["requested_timeout_s"], body["applied_timeout_s"]) == (3600, 50)
    assert body["timed_out"] is False and body["done"] is True and body["operation"]["result"] is not None


def test_wait_answers_problems_over_the_threadless_path(http, create, live_api, other_agent):
    created = create("never_finishes")
    bad = http.get(f"/api/v1/operations/{created['id']}/wait", params={"timeout_s": "2_5"})
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/problem+json"
    assert bad.json()["code"] == "invalid_timeout"
    anonymous = httpx.get(f"{live_api.url}/api/v1/operations/{created['id']}/wait?timeout_s=0")
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthenticated"
    foreign = httpx.get(
        f"{live_api.url}/api/v1/operations/{created['id']}/wait?timeout_s=0",
        headers={"Authorization": f"Bearer {other_agent.token}"},
    )
    assert foreign.status_code == 404 and foreign.json()["code"] == "operation_not_found"
    post = http.post(f"/api/v1/operations/{created['id']}/wait")
    assert post.status_code == 405 and post.json()["code"] == "method_not_allowed"


def test_many_open_waits_hold_no_threads(live_api, agent, create, http):
    """60 parked waits: the process gains no thread per wait (only the API's fixed database pool)."""
    created = [create("never_finishes") for _ in range(60)]
    # Warm the database pool so its threads exist before the baseline.
    http.get(f"/api/v1/operations/{created[0]['id']}/wait", params={"timeout_s": "0"})
    baseline = set(threading.enumerate())

    async def wait_all() -> list[dict]:
        headers = {"Authorization": f"Bearer {agent.token}"}
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=live_api.url, headers=headers, timeout=70, limits=limits) as client:
            calls = [client.get(f"/api/v1/operations/{op['id']}/wait", params={"timeout_s": "40"}) for op in created]
            tasks = [asyncio.ensure_future(call) for call in calls]
            return [response.json() for response in await asyncio.gather(*tasks)]

    result: dict[str, object] = {}

    def cancel_when_parked() -> None:
        wait_until(lambda: api_wait.open_waits() >= len(created), timeout=20)
        result["new_threads"] = [
            thread.name
            for thread in set(threading.enumerate()) - baseline
            # this helper thread, and the test client's own event-loop executor (DNS lookups)
            if thread is not threading.current_thread() and not thread.name.startswith("asyncio_")
        ]
        for op in created:
            assert http.post(f"/api/v1/operations/{op['id']}/cancel").status_code == 202

    worker = in_background(cancel_when_parked)
    bodies = run_async(wait_all())
    worker.join(timeout=30)
    assert all(body["done"] and body["operation"]["status"] == "closed" for body in bodies)
    new_threads = result["new_threads"]
    assert all(name.startswith("api-db") for name in new_threads), new_threads
    assert len(new_threads) <= settings.API_DB_THREADS
    assert api_wait.open_waits() == 0


def test_waits_beyond_the_per_agent_cap_are_429(http, create, settings):
    settings.API_WAIT_MAX_PER_AGENT = 1
    first, second = create("never_finishes"), create("never_finishes")
    parked = in_background(lambda: http.get(f"/api/v1/operations/{first['id']}/wait", params={"timeout_s": "2"}))
    wait_until(lambda: api_wait.open_waits() >= 1)
    refused = http.get(f"/api/v1/operations/{second['id']}/wait", params={"timeout_s": "2"})
    parked.join(timeout=10)
    assert refused.status_code == 429 and refused.json()["code"] == "too_many_waits"
    assert refused.headers["retry-after"] == "5"
