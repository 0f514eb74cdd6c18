"""On-call's requests go through operations.infrastructure.outbound against a real local server: uncompressed answers
only, so a receiver (or whoever answers for its URL) cannot make a worker inflate a bomb; and the
messages about no card (a callback that gave up, a business deadline near) are outbox rows sent
through the same channels, under the same URL rules."""

from __future__ import annotations

import tracemalloc

import pytest
from django.utils import timezone

from escalations.oncall import notices
from escalations.oncall.channels.base import Unsendable, admit
from operations.infrastructure import outbound
from operations.models import NotificationDelivery
from tests.operations.test_http import PLAIN, provider  # the fixture, shared

__all__ = ["provider"]


def test_a_compressed_answer_keeps_its_status_but_is_never_inflated(provider, settings):
    settings.NOTIFY_ALLOWED_HOSTS = [provider.url.removeprefix("http://")]
    target = admit(f"{provider.url}/gzip-gzip", what="the test receiver")
    tracemalloc.start()
    try:
        answer = outbound.send(target=target, method="POST", content=b"{}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    assert (answer.http_status, answer.body, answer.transport_error) == (200, b"", None)
    assert provider.accept_encodings == ["identity"]


def test_a_plain_answer_is_read(provider, settings):
    settings.NOTIFY_ALLOWED_HOSTS = [provider.url.removeprefix("http://")]
    answer = outbound.send(
        target=admit(f"{provider.url}/plain", what="the test receiver"), method="POST", content=b"{}"
    )
    assert (answer.http_status, answer.body) == (200, PLAIN)


def test_plain_http_to_a_host_not_listed_is_refused_without_quoting_the_url(provider):
    with pytest.raises(Unsendable) as refused:
        admit(f"{provider.url}/plain?sig=secret-part", what="the Slack webhook in ONCALL_X")
    assert (
        refused.value.why
        == "the Slack webhook in ONCALL_X must be https (or its host:port listed in NOTIFY_ALLOWED_HOSTS)"
    )
    assert provider.accept_encodings == []


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/gzip", "/plain"])
def test_the_failed_callback_and_business_deadline_webhook_asks_for_identity_and_never_inflates(
    provider,
    settings,
    make_operation,
    pump,
    path,
):
    """The messages about no card once had a webhook post of their own that read whole, decompressed
    answers: they are outbox rows now, sent by the webhook channel (identity asked, a compressed
    answer refused unread, 64 KiB at most)."""
    settings.NOTIFY_EMAILS = []
    settings.NOTIFY_WEBHOOK_URL = f"{provider.url}{path}"
    settings.NOTIFY_ALLOWED_HOSTS = [provider.url.removeprefix("http://")]
    op = make_operation("slow_success__id=webhook")
    notices.queue_callback_failed(
        operation_id=op.pk, callback_id="evt_7", event_type="operation.completed", reason="x", now=timezone.now()
    )
    pump()  # the URLconf's imports, before measuring (the row is sent here)
    notices.queue_callback_failed(
        operation_id=op.pk, callback_id="evt_8", event_type="operation.completed", reason="x", now=timezone.now()
    )
    tracemalloc.start()
    try:
        outcomes = pump()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcomes == ["sent"] and peak < 4 * 1024 * 1024
    assert provider.accept_encodings == ["identity", "identity"]
    rows = NotificationDelivery.objects.filter(operation=op).order_by("pk")
    assert [(r.event, r.channel, r.state, r.http_status) for r in rows] == [
        ("callback_failed", "slack_webhook", "sent", 200)
    ] * 2


@pytest.mark.django_db
def test_the_webhook_of_messages_outside_cards_keeps_the_notification_url_rules(
    provider,
    settings,
    make_operation,
    pump,
):
    """Plain http to a host not in NOTIFY_ALLOWED_HOSTS is refused before anything is sent, as for
    the same webhook named by the settings policy: the row says so."""
    settings.NOTIFY_EMAILS = []
    settings.NOTIFY_WEBHOOK_URL = f"{provider.url}/plain"
    op = make_operation("slow_success__id=refused")
    notices.queue_callback_failed(
        operation_id=op.pk, callback_id="evt_7", event_type="operation.completed", reason="x", now=timezone.now()
    )
    assert pump() == ["failed"] and provider.accept_encodings == []
    row = NotificationDelivery.objects.get(operation=op)
    assert (
        row.detail
        == "the Slack webhook in NOTIFY_WEBHOOK_URL must be https (or its host:port listed in NOTIFY_ALLOWED_HOSTS)"
    )


@pytest.mark.django_db
def test_a_message_about_no_card_is_retried_capped_and_recorded_like_every_message(
    fake_slack, settings, make_operation, pump, clock, mailoutbox, admin_client
):
    """Before 2.5 a failed-callback message was one attempt per channel, a 5xx lost it and nothing
    said so; it is an outbox row now: retried, counted against NOTIFY_MAX_PER_HOUR, recorded."""
    from tests.support import CANARY_SLACK_HOOK

    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = fake_slack.webhook_url(CANARY_SLACK_HOOK)
    settings.NOTIFY_MAX_PER_HOUR = 4
    fake_slack.answer("500")
    op = make_operation("slow_success__id=retried")
    notices.queue_callback_failed(
        operation_id=op.pk, callback_id="evt_1", event_type="operation.completed", reason="x", now=timezone.now()
    )
    assert sorted(pump()) == ["retry", "sent"]
    clock.shift(60)
    assert pump() == ["sent"]
    [post] = [p for p in fake_slack.posted("webhook") if p.status == 200]
    link = f"{settings.SITE_URL}/operations/{op.pk}/"
    assert post.body["pollerdash"] == {"event": "escalation.callback_failed", "url": link}
    assert post.body["text"].startswith(f"*Callback not delivered* for <{link}|{op.pk}>")
    [mail] = mailoutbox
    assert mail.subject == f"[pollerdash] Callback not delivered: {op.pk}"
    # The hour's cap counts every attempt (3 so far): one more message fits, the rest are held back.
    for n in (2, 3):
        notices.queue_callback_failed(
            operation_id=op.pk, callback_id=f"evt_{n}", event_type="operation.completed", reason="x", now=timezone.now()
        )
    assert sorted(pump()) == ["sent", "skipped", "skipped", "skipped"]
    states = NotificationDelivery.objects.filter(operation=op, state="skipped").values_list("detail", flat=True)
    assert set(states) == {"NOTIFY_MAX_PER_HOUR (4) reached"}
    # The admin's records list them with their operation (they are on no card).
    listed = admin_client.get("/admin/operations/notificationdelivery/").content.decode()
    assert listed.count(op.pk) >= 6 and "callback_failed" in listed
