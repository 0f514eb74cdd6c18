"""pollerdash/client.py against the live ASGI server, and its callback verifier."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from operations.api import wait as api_wait
from operations.callbacks.delivery import sign
from operations.models import Operation
from operations.polls.controller import poll_once
from pollerdash.client import PollerdashClient, PollerdashError, WebhookVerificationFailed, WebhookVerifier
from tests.api.conftest import wait_until
from tests.support import job_id

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_imports_without_django():
    code = (
        "import sys; import pollerdash.client as c; "
        "assert not [m for m in sys.modules if m == 'django' or m.startswith(('django.', 'operations'))]; "
        "print(c.PollerdashClient.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, env={"PATH": ""}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "PollerdashClient"


@pytest.fixture
def client(live_api, agent):
    with PollerdashClient(live_api.url, agent.token) as found:
        yield found


def poll_when_waiting(operation_id: str, polls: int = 1) -> threading.Thread:
    def run() -> None:
        wait_until(lambda: api_wait.open_waits() >= 1)
        for _ in range(polls):
            Operation.objects.filter(pk=operation_id).update(next_poll_at=None)
            op = Operation.objects.get(pk=operation_id)
            poll_once(operation_id=op.pk, fence=op.fence)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_every_call_of_the_client(client, profile):
    job = job_id("slow_success", polls=0)
    deadline = datetime.now(UTC) + timedelta(hours=1)
    op = client.register(profile.slug, job, purpose="report", deadline=deadline, metadata={"run": "1"})
    assert op["status"] == "pending" and op["deadline"] == deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    again = client.register(profile.slug, job, purpose="report", metadata={"run": "1"})
    assert again["id"] == op["id"]  # a replay, not a duplicate
    with pytest.raises(PollerdashError) as other:
        client.register(profile.slug, job, purpose="another report")
    assert other.value.code == "operation_exists" and other.value.problem["operation_id"] == op["id"]
    assert client.get(op["id"])["id"] == op["id"]
    timed_out = client.wait(op["id"], timeout_s=0)
    assert timed_out["timed_out"] is True and timed_out["operation_id"] == op["id"]
    assert [item["id"] for item in client.iter_open(page_size=1)] == [op["id"]]
    with pytest.raises(PollerdashError) as not_done:
        client.ack(op["id"])
    assert not_done.value.code == "operation_not_done" and not not_done.value.transient
    cancelled = client.cancel(op["id"], reason="no longer needed")
    assert cancelled["status"] == "closed" and cancelled["error"]["code"] == "watch_cancelled"
    assert client.ack(op["id"])["acknowledged_at"] is not None
    assert client.list_open()["data"] == []
    with pytest.raises(PollerdashError) as missing:
        client.get("op_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert missing.value.code == "operation_not_found" and missing.value.status == 404
    with pytest.raises(PollerdashError) as refused:
        client.register(profile.slug, "a/b")
    assert refused.value.code == "invalid_provider_job_id"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("scenario", "params", "outcome", "status"),
    [
        ("slow_success", {"polls": 0}, "succeeded", "succeeded"),
        ("partial", {"total": 10, "failed": 1}, "succeeded", "partially_succeeded"),
        ("late_failure", {"polls": 0}, "failed", "failed"),
        ("unknown_state", {}, "needs_attention", "needs_attention"),
    ],
)
def test_await_operation_returns_each_outcome_with_the_id(client, profile, scenario, params, outcome, status):
    op = client.register(profile.slug, job_id(scenario, **params))
    worker = poll_when_waiting(op["id"])
    result = client.await_operation(op["id"], max_wait_s=30)
    worker.join(timeout=10)
    assert (result.outcome, result.status, result.operation_id) == (outcome, status, op["id"])
    assert result.operation["id"] == op["id"] and result.waited_s < 10


@pytest.mark.django_db(transaction=True)
def test_await_operation_times_out_with_the_id(client, profile):
    op = client.register(profile.slug, job_id("never_finishes"))
    started = time.monotonic()
    result = client.await_operation(op["id"], max_wait_s=1.5)
    assert result.outcome == "timed_out" and result.operation_id == op["id"] and not result.done
    assert result.operation["agent_hint"].startswith("NOT DONE.")
    assert 1.0 <= time.monotonic() - started < 5


def test_await_operation_rides_out_transient_errors():
    import httpx

    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.ConnectError("refused")
        if calls["n"] == 2:
            return httpx.Response(503, json={"code": "unavailable", "detail": "x"}, headers={"Retry-After": "0"})
        operation = {"id": "op_1", "status": "succeeded", "done": True}
        return httpx.Response(200, json={"operation": operation})

    with PollerdashClient("http://pollerdash.test", "t", transport=httpx.MockTransport(handler)) as client:
        result = client.await_operation("op_1", max_wait_s=20)
    assert result.outcome == "succeeded" and calls["n"] == 3


# --- the callback verifier ---------------------------------------------------------------------------


SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def signed(body: bytes, *, at: datetime, msg_id: str = "evt_01JDX7F3YB0K6S8H2T4V9W1QRA") -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": sign(secret=SECRET, event_id_=msg_id, at=at, payload=body),
    }


def test_the_verifier_accepts_pollerdash_signatures_and_refuses_everything_else():
    body = b'{"type":"operation.completed","data":{"operation_id":"op_1","sequence":3}}'
    now = datetime.now(UTC).replace(microsecond=0)
    verifier = WebhookVerifier(SECRET)
    headers = signed(body, at=now)
    assert verifier.verify(body, headers)["data"]["sequence"] == 3
    assert verifier.verify(body, {**headers, "webhook-signature": "v1,AAAA bogus " + headers["webhook-signature"]})
    bad = {
        "tampered body": (body.replace(b"3", b"4"), headers),
        "other secret": (
            body,
            {**headers, "webhook-signature": signed(body, at=now)["webhook-signature"][:-5] + "AAAA="},
        ),
        "too old": (body, signed(body, at=now - timedelta(seconds=301))),
        "too new": (body, signed(body, at=now + timedelta(seconds=301))),
        "fractional ts": (body, {**headers, "webhook-timestamp": headers["webhook-timestamp"] + ".5"}),
        "spaced ts": (body, {**headers, "webhook-timestamp": " " + headers["webhook-timestamp"]}),
        "no comma": (body, {**headers, "webhook-signature": "v1"}),
        "non-ascii": (body, {**headers, "webhook-signature": "v1,\u00e9" * 3}),
        "too many": (body, {**headers, "webhook-signature": " ".join([headers["webhook-signature"]] * 11)}),
        "dotted id": (body, {**headers, "webhook-id": "evt.1"}),
        "other id": (body, {**headers, "webhook-id": "evt_other"}),
        "missing": (body, {"webhook-id": headers["webhook-id"]}),
    }
    for name, (raw, hdrs) in bad.items():
        with pytest.raises(WebhookVerificationFailed):
            verifier.verify(raw, hdrs)
            pytest.fail(name)
