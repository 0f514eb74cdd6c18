"""Completion callbacks: outbox, URL policy (SSRF), and delivery against a real local receiver.

The receiver is a real threaded HTTP server on an ephemeral loopback port, allowed through
CALLBACK_ALLOWED_HOSTS. Queued django-q2 tasks are run in-process by `run_queued_tasks` (what a
worker does with them); the integration test runs a real qcluster.
"""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from standardwebhooks import Webhook

from operations.callbacks import delivery as callbacks_delivery
from operations.callbacks import outbox, targets
from operations.callbacks.delivery import dispatch_due_callbacks
from operations.callbacks.outbox import record_event
from operations.callbacks.targets import callback_url_problem
from operations.infrastructure.addresses import allowed_endpoints
from operations.models import AuditEntry, CallbackDelivery, CallbackEndpoint, Operation
from operations.polls.controller import poll_once
from tests.api.support import Receiver
from tests.support import job_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver(settings):
    found = Receiver()
    settings.CALLBACK_ALLOWED_HOSTS = [f"127.0.0.1:{found.port}"]
    yield found
    found.stop()


def run_queued_tasks() -> list[object]:
    """Run the django-q2 tasks waiting in the ORM queue, as a worker would."""
    results = []
    for row in list(OrmQ.objects.order_by("id")):
        task = SignedPackage.loads(row.payload)
        row.delete()
        results.append(import_string(task["func"])(*task["args"], **task.get("kwargs", {})))
    return results


def deliver_due() -> list[object]:
    dispatch_due_callbacks(limit=100)
    return run_queued_tasks()


@pytest.fixture
def completed_with_callback(register, receiver, drive):
    """An operation registered with the receiver as callback, driven to success."""

    def make(**body: object) -> Operation:
        created = register("slow_success", params={"polls": 1}, callback={"url": receiver.url}, **body)
        op = Operation.objects.get(pk=created["id"])
        drive(op)
        op.refresh_from_db()
        assert op.status == "succeeded"
        return op

    return make


# --- URL policy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",
        "https://user:pass@hooks.example.com/x",
        "https://hooks.example.com@evil.example/x",
        "https://hooks.example.com:8080/x",
        "https://hooks.example.com/x#frag",
        "https://hooks.example.com/" + "x" * 2048,
        "https://127.0.0.1/x",
        "https://10.0.0.5/x",
        "https://172.16.0.1/x",
        "https://192.168.1.1/x",
        "https://100.64.0.1/x",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/x",
        "https://[fd00::1]/x",
        "https://[fe80::1]/x",
        "https://[::ffff:127.0.0.1]/x",
        "https://[64:ff9b::a00:1]/x",
        "https://2130706433/x",
        "https://0x7f.1/x",
        "https://0x7f000001/x",
        "https://017700000001/x",
        "https://127.1/x",
        "https://localhost/x",
        "https://api.localhost/x",
        "https://metadata.google.internal/x",
        "https://intranet/x",
        "https://h\u00e9llo.example/x",
        "https://hooks.example.com/a b",
        "ftp://hooks.example.com/x",
        "",
    ],
)
def test_unsafe_callback_urls_are_rejected_at_registration(api, profile, url):
    before = Operation.objects.count()
    response = api.register(provider=profile.slug, provider_job_id=job_id("slow_success"), callback={"url": url})
    assert response.status_code == 422, url
    body = response.json()
    assert body["code"] == "callback_url_rejected" and body["errors"][0]["pointer"] == "/body/callback/url"
    assert Operation.objects.count() == before


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/x", "https://hooks.example.com:8443/p?q=1", "https://93.184.216.34/x"]
)
def test_public_https_callback_urls_are_accepted(url):
    assert callback_url_problem(url) is None


def test_allowed_host_port_pairs_may_use_loopback_and_http(settings):
    settings.CALLBACK_ALLOWED_HOSTS = ["127.0.0.1:8123", "localhost:9", "[::1]:8123"]
    assert callback_url_problem("http://127.0.0.1:8123/hook") is None
    assert callback_url_problem("https://127.0.0.1:8123/hook") is None
    assert callback_url_problem("http://localhost:9/hook") is None
    assert callback_url_problem("http://[::1]:8123/hook") is None
    assert callback_url_problem("http://[0:0::1]:8123/hook") is None  # one address, two spellings
    assert callback_url_problem("http://10.0.0.1/hook") is not None


@pytest.mark.parametrize(
    ("allowed", "url"),
    [
        # Another port of an allowed host: Redis, the fake provider's reset endpoint, anything.
        (["127.0.0.1:8123"], "http://127.0.0.1:6379/"),
        (["127.0.0.1:8123"], "http://127.0.0.1:8765/_reset"),
        (["127.0.0.1:8123"], "https://127.0.0.1/hook"),
        (["127.0.0.1:8123"], "http://127.0.0.1/hook"),
        # A bare host is https on 443 only.
        (["127.0.0.1"], "http://127.0.0.1/hook"),
        (["127.0.0.1"], "http://127.0.0.1:443/hook"),
        (["127.0.0.1"], "https://127.0.0.1:6379/hook"),
        (["127.0.0.1"], "https://127.0.0.1:8443/hook"),
        (["localhost"], "http://localhost:9/hook"),
        (["[::1]:8123"], "http://[::1]:6379/hook"),
        (["127.0.0.1:8123"], "ftp://127.0.0.1:8123/hook"),
    ],
)
def test_an_allowed_host_exempts_only_its_listed_port(settings, api, profile, allowed, url):
    settings.CALLBACK_ALLOWED_HOSTS = allowed
    problem = callback_url_problem(url)
    assert problem is not None and "CALLBACK_ALLOWED_HOSTS exempts" in problem, (url, problem)
    response = api.register(provider=profile.slug, provider_job_id=job_id("slow_success"), callback={"url": url})
    assert response.status_code == 422 and response.json()["code"] == "callback_url_rejected"


def test_a_bare_allowed_host_is_https_on_443(settings):
    settings.CALLBACK_ALLOWED_HOSTS = ["hooks.internal", "127.0.0.1"]
    assert callback_url_problem("https://hooks.internal/cb") is None
    assert callback_url_problem("https://hooks.internal:443/cb") is None
    assert callback_url_problem("https://127.0.0.1/cb") is None
    # Exempt names are sent as they are (no public-address check), on that port only.
    assert targets.resolve_target("https://hooks.internal/cb").url == "https://hooks.internal/cb"


def test_a_public_host_that_is_also_listed_keeps_the_public_rules(settings):
    settings.CALLBACK_ALLOWED_HOSTS = ["hooks.example.com:9000"]
    assert callback_url_problem("https://hooks.example.com:8443/cb") is None
    assert callback_url_problem("http://hooks.example.com:9000/cb") is None


def test_a_callback_to_another_port_of_an_allowed_host_is_never_sent(settings, receiver, register, drive):
    """Allowed when registered (the entry named that port) and the entry changed since: send time
    checks again and sends nothing to the port no longer listed."""
    created = register("slow_success", params={"polls": 1}, callback={"url": receiver.url})
    settings.CALLBACK_ALLOWED_HOSTS = [f"127.0.0.1:{receiver.port + 1}"]
    drive(Operation.objects.get(pk=created["id"]))
    assert deliver_due() == ["retry"]
    assert receiver.requests == []
    delivery = CallbackDelivery.objects.get(operation_id=created["id"])
    assert "CALLBACK_ALLOWED_HOSTS exempts 127.0.0.1 on its listed port only" in delivery.last_error


@pytest.mark.parametrize("entry", ["127.0.0.1:99999", "::1", "[::g]:80", "host:port", "https://hooks.example.com"])
def test_a_malformed_allowed_hosts_entry_is_named(entry):
    with pytest.raises(ValueError, match="CALLBACK_ALLOWED_HOSTS entry"):
        allowed_endpoints((entry,))


def test_a_name_that_resolves_to_a_private_address_is_refused_at_send_time(register, drive, monkeypatch):
    created = register("slow_success", params={"polls": 1}, callback={"url": "https://hooks.example.com/cb"})
    drive(Operation.objects.get(pk=created["id"]))
    looked_up: list[str] = []

    def resolve(host: str, port: object, *args: object, **kwargs: object) -> list[tuple]:
        looked_up.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 443))]

    monkeypatch.setattr(targets.socket, "getaddrinfo", resolve)
    assert deliver_due() == ["retry"]
    delivery = CallbackDelivery.objects.get(operation_id=created["id"])
    assert looked_up == ["hooks.example.com"]
    assert delivery.state == "pending" and delivery.attempts == 1 and delivery.last_http_status is None
    assert "non-public address (10.1.2.3)" in delivery.last_error


def test_a_public_resolution_is_pinned_to_the_checked_address(monkeypatch):
    monkeypatch.setattr(
        targets.socket,
        "getaddrinfo",
        lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))],
    )
    target = targets.resolve_target("https://hooks.example.com/cb?x=1")
    assert target.url == "https://93.184.216.34/cb?x=1"
    assert target.headers == {"Host": "hooks.example.com"} and target.extensions == {
        "sni_hostname": "hooks.example.com"
    }


# --- delivery -------------------------------------------------------------------------------------------


def test_500_three_times_then_200_is_delivered_once_with_one_webhook_id(
    completed_with_callback, receiver, agent, clock
):
    receiver.statuses = [500, 500, 500]
    op = completed_with_callback()
    delivery = CallbackDelivery.objects.get(operation=op)
    assert delivery.event_type == "operation.completed" and delivery.sequence == op.sequence
    outcomes, gaps = [], []
    for _ in range(6):
        due = CallbackDelivery.objects.get(pk=delivery.pk)
        if due.state != "pending":
            break
        if due.next_attempt_at > timezone.now():
            gaps.append((due.next_attempt_at - due.last_attempt_at).total_seconds())
            clock.move_to(due.next_attempt_at, tick=False)
        outcomes += deliver_due()
        # The signature of this attempt verifies now, with the agent's secret, as a receiver would check it.
        sent = receiver.requests[-1]
        Webhook(agent.webhook_secret).verify(sent["body"], sent["headers"])
    assert outcomes == ["retry", "retry", "retry", "delivered"]
    assert len(receiver.requests) == 4
    assert {r["headers"]["webhook-id"] for r in receiver.requests} == {delivery.pk}
    assert len({r["headers"]["webhook-signature"] for r in receiver.requests}) == 4
    assert len({r["headers"]["webhook-timestamp"] for r in receiver.requests}) == 4
    # Standard Webhooks schedule with +-20 % jitter: 5 s, 5 min, 30 min.
    for gap, planned in zip(gaps, (5, 300, 1800), strict=True):
        assert planned * 0.8 <= gap <= planned * 1.2
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and delivery.attempts == 4 and delivery.last_http_status == 200
    body = json.loads(receiver.requests[0]["body"])
    assert body["type"] == "operation.completed"
    assert body["data"]["operation_id"] == op.pk and body["data"]["status"] == "succeeded"
    assert body["data"]["sequence"] == op.sequence and body["data"]["done"] is True
    assert receiver.requests[0]["headers"]["content-type"] == "application/json"
    clock.shift(timedelta(days=2))
    assert deliver_due() == []  # delivered means done: nothing is sent again


def test_a_claimed_attempt_is_enqueued_once_and_sent_once(completed_with_callback, receiver):
    op = completed_with_callback()
    assert dispatch_due_callbacks(limit=10) == 1
    assert dispatch_due_callbacks(limit=10) == 0
    (task,) = [SignedPackage.loads(p) for p in OrmQ.objects.values_list("payload", flat=True)]
    delivery_id, attempt = task["args"]
    assert callbacks_delivery.deliver(delivery_id=delivery_id, attempt=attempt) == "delivered"
    assert callbacks_delivery.deliver(delivery_id=delivery_id, attempt=attempt) == "stale"  # a redelivered task
    assert len(receiver.requests) == 1 and CallbackDelivery.objects.get(operation=op).attempts == 1


def test_redirects_are_not_followed_and_count_as_failures(completed_with_callback, receiver):
    receiver.statuses = [301]
    op = completed_with_callback()
    assert deliver_due() == ["retry"]
    assert [r["path"] for r in receiver.requests] == ["/hooks/pollerdash"]
    assert CallbackDelivery.objects.get(operation=op).last_http_status == 301


def test_410_disables_the_endpoint_and_puts_it_in_front_of_people(
    completed_with_callback, receiver, api, settings, pump
):
    from django.core import mail

    settings.NOTIFY_EMAILS = ["oncall@example.com"]
    receiver.statuses = [410]
    op = completed_with_callback()
    assert deliver_due() == ["disabled"]
    assert pump() == ["sent"]  # on-call is told by a worker, after the commit
    assert CallbackEndpoint.objects.get(url=receiver.url).disabled_at is not None
    second = completed_with_callback()
    assert deliver_due() == ["disabled"]
    assert pump() == ["sent"]
    assert len(receiver.requests) == 1  # the disabled endpoint is not called again
    for operation in (op, second):
        obj = api.get(f"/api/v1/operations/{operation.pk}").json()
        assert any("not delivered" in warning for warning in obj["warnings"])
        assert AuditEntry.objects.filter(operation_id=operation.pk, type="callback.failed").count() == 1
    assert [message.subject for message in mail.outbox] == [
        f"[pollerdash] Callback not delivered: {operation.pk}" for operation in (op, second)
    ]


def test_exhausted_retries_escalate_and_the_operation_stays_open(completed_with_callback, receiver, api, clock):
    receiver.statuses = [500] * 20
    op = completed_with_callback()
    outcomes = []
    for _ in range(12):
        due = CallbackDelivery.objects.get(operation=op)
        if due.state != "pending":
            break
        clock.move_to(max(due.next_attempt_at, timezone.now()), tick=False)
        outcomes += deliver_due()
    assert outcomes == ["retry"] * 9 + ["failed"]
    assert len(receiver.requests) == len(callbacks_delivery.SCHEDULE_S) == 10
    delivery = CallbackDelivery.objects.get(operation=op)
    assert delivery.state == "failed" and delivery.last_http_status == 500
    entry = json.loads(bytes(AuditEntry.objects.get(operation_id=op.pk, type="callback.failed").body))
    assert entry["data"]["attempts"] == 10 and entry["data"]["event_id"] == delivery.pk
    listed = api.get("/api/v1/operations?view=open").json()
    assert [item["id"] for item in listed["data"]] == [op.pk]
    assert any("not delivered" in warning for warning in listed["data"][0]["warnings"])


def test_needs_attention_is_announced_too(register, receiver, drive):
    created = register("unknown_state", callback={"url": receiver.url})
    drive(Operation.objects.get(pk=created["id"]))
    assert deliver_due() == ["delivered"]
    assert json.loads(receiver.requests[0]["body"])["type"] == "operation.needs_attention"


# --- one event per completion ---------------------------------------------------------------------------


def test_poll_and_duplicate_completion_produce_one_event(register, receiver, drive, clock, rng):
    created = register("duplicate_completion", params={"polls": 1}, callback={"url": receiver.url})
    op = Operation.objects.get(pk=created["id"])
    fences = []
    for _ in range(3):
        op.refresh_from_db()
        if op.done:
            break
        if op.next_poll_at > timezone.now():
            clock.move_to(op.next_poll_at, tick=False)
        fences.append(op.fence)
        poll_once(operation_id=op.pk, fence=op.fence, rng=rng)
    # The same completing poll delivered twice by the queue, and a completion recorded again.
    poll_once(operation_id=op.pk, fence=fences[-1], rng=rng)
    op.refresh_from_db()
    with transaction.atomic():
        record_event(operation=Operation.objects.select_for_update().get(pk=op.pk), event_type="operation.completed")
    assert CallbackDelivery.objects.filter(operation=op).count() == 1
    with pytest.raises(IntegrityError), transaction.atomic():
        CallbackDelivery.objects.create(
            id=outbox.event_id(),
            operation=op,
            event_type="operation.completed",
            sequence=op.sequence + 5,
            payload=b"{}",
            url=receiver.url,
            created_at=timezone.now(),
        )
    assert deliver_due() == ["delivered"] and len(receiver.requests) == 1


def test_the_event_commits_with_the_status_change_or_not_at_all(register, receiver):
    created = register("never_finishes", callback={"url": receiver.url})

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=created["id"])
        op.status = "succeeded"
        op.sequence += 1
        op.save()
        record_event(operation=op, event_type="operation.completed")
        raise Boom
    assert not CallbackDelivery.objects.exists()
    assert Operation.objects.get(pk=created["id"]).status == "pending"


def test_an_agent_cancel_announces_the_closed_operation(register, receiver, api):
    created = register("never_finishes", callback={"url": receiver.url})
    api.post(f"/api/v1/operations/{created['id']}/cancel")
    assert "delivered" in deliver_due()  # beside the provider cancel forwarded by the same workers
    data = json.loads(receiver.requests[0]["body"])["data"]
    assert data["status"] == "closed" and data["done"] is True


def test_the_failed_callback_email_quotes_the_agents_address_after_the_link_and_defanged(
    register, drive, monkeypatch, settings, clock, mailoutbox, pump
):
    settings.NOTIFY_EMAILS = ["oncall@example.com"]
    created = register("slow_success", params={"polls": 1}, callback={"url": "https://login.evil.example/cb"})
    drive(Operation.objects.get(pk=created["id"]))
    monkeypatch.setattr(
        targets.socket,
        "getaddrinfo",
        lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 443))],
    )
    for _ in range(12):
        due = CallbackDelivery.objects.get(operation_id=created["id"])
        if due.state != "pending":
            break
        clock.move_to(max(due.next_attempt_at, timezone.now()), tick=False)
        deliver_due()
    assert pump() == ["sent"]  # on-call is told by a worker, after the commit
    [mail] = mailoutbox
    lines = mail.body.splitlines()
    [why] = [n for n, line in enumerate(lines) if line.startswith("Why (may quote the agent's callback address")]
    [link] = [n for n, line in enumerate(lines) if f"{settings.SITE_URL}/operations/{created['id']}/" in line]
    assert link < why
    assert "login[.]evil[.]example resolves to a non-public address (10[.]1[.]2[.]3)" in lines[why]
    assert "evil.example" not in mail.body
