"""The notification channels' one POST against a real local server: uncompressed answers only, so
a receiver (or whoever answers for its URL) cannot make a worker inflate a bomb."""

from __future__ import annotations

import tracemalloc

import pytest
from django.urls import reverse

from escalations.oncall import transport
from tests.operations.test_http import PLAIN, provider  # noqa: F401 - the fixture, shared

__all__ = ["provider"]


def test_a_compressed_answer_keeps_its_status_but_is_never_inflated(provider, settings):  # noqa: F811
    settings.NOTIFY_ALLOWED_HOSTS = [provider.url.removeprefix("http://")]
    tracemalloc.start()
    try:
        answer = transport.post(f"{provider.url}/gzip-gzip", body=b"{}", headers={})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    assert (answer.status, answer.body, answer.transport_error) == (200, b"", "")
    assert provider.accept_encodings == ["identity"]


def test_a_plain_answer_is_read(provider):  # noqa: F811
    answer = transport.post(f"{provider.url}/plain", body=b"{}", headers={"Content-Type": "application/json"})
    assert (answer.status, answer.body) == (200, PLAIN)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/gzip", "/plain"])
def test_the_failed_callback_and_business_deadline_webhook_asks_for_identity_and_never_inflates(
    provider,  # noqa: F811
    settings,
    path,
):
    """escalations/notifications.py's webhook post once read whole, decompressed answers: it follows the
    provider client's rule now (identity asked, a compressed answer refused unread, 64 KiB at most)."""
    from escalations import notifications

    settings.NOTIFY_EMAILS = []
    settings.NOTIFY_WEBHOOK_URL = f"{provider.url}{path}"
    settings.NOTIFY_ALLOWED_HOSTS = [provider.url.removeprefix("http://")]
    reverse("operation_detail", args=["op_01JWEBHOOK00000000000000"])  # the URLconf's imports, before measuring
    tracemalloc.start()
    try:
        outcome = notifications.deliver_callback_failure(
            operation_id="op_01JWEBHOOK00000000000000", delivery_id="7", event_type="operation.completed", reason="x"
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome == "sent: webhook" and peak < 4 * 1024 * 1024
    assert provider.accept_encodings == ["identity"]


@pytest.mark.django_db
def test_the_webhook_of_messages_outside_cards_keeps_the_notification_url_rules(provider, settings):  # noqa: F811
    """Plain http to a host not in NOTIFY_ALLOWED_HOSTS is refused before anything is sent, as for
    the same webhook named by the settings policy."""
    from escalations import notifications

    settings.NOTIFY_EMAILS = []
    settings.NOTIFY_WEBHOOK_URL = f"{provider.url}/plain"
    outcome = notifications.deliver_callback_failure(
        operation_id="op_01JWEBHOOK00000000000000", delivery_id="7", event_type="operation.completed", reason="x"
    )
    assert outcome == "sent: nothing (every channel failed)" and provider.accept_encodings == []
