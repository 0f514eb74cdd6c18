"""Telling on-call that an agent's completion callback gave up, by email and the Slack-compatible webhook.

Cards reach people through their escalation policy (escalations.oncall); a callback that could not
be delivered is not a card (the operation may be done), so its one message goes to NOTIFY_EMAILS
and NOTIFY_WEBHOOK_URL, queued in the transaction that gave up and sent by a worker. It carries
pollerdash's link first and quotes the agent's callback address as defanged data after it;
every message to people counts against NOTIFY_MAX_PER_HOUR (`hourly_slot`). The webhook URL is a
secret: it is registered with the log redactor and never logged.
"""

from __future__ import annotations

import logging

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse
from django.utils import timezone
from django_q.tasks import async_task

from escalations.agent_text import quoted, slack_escaped
from escalations.oncall.email import ascii_subject
from operations import ratelimit
from operations.models import CallbackDelivery
from operations.redaction import register_secret

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = httpx.Timeout(5.0, connect=3.0)


def configured() -> bool:
    return bool(settings.NOTIFY_EMAILS or settings.NOTIFY_WEBHOOK_URL)


def on_callback_undeliverable(*, delivery: CallbackDelivery, reason: str, **_: object) -> None:
    """operations.events.callback_undeliverable: queue a message to on-call with the transaction."""
    if not configured():
        return
    async_task(
        "escalations.tasks.notify_callback_failed",
        delivery.operation_id,
        delivery.pk,
        delivery.event_type,
        reason[:300],
        task_name=f"notify-callback-{delivery.pk}",
    )


def deliver_callback_failure(*, operation_id: str, delivery_id: str, event_type: str, reason: str) -> str:
    """Tell on-call that an agent's callback endpoint gave up. Returns a short outcome."""
    if not hourly_slot():
        logger.warning(
            "operation %s: callback failure notification skipped, NOTIFY_MAX_PER_HOUR (%s) reached",
            operation_id,
            settings.NOTIFY_MAX_PER_HOUR,
        )
        return f"skipped: NOTIFY_MAX_PER_HOUR ({settings.NOTIFY_MAX_PER_HOUR}) reached"
    link = f"{settings.SITE_URL}{reverse('operation_detail', args=[operation_id])}"
    why = f"Why (may quote the agent's callback address; links disabled): {quoted(reason)}"
    text = (
        f"pollerdash could not deliver the {event_type} callback {delivery_id} of operation "
        f"{operation_id}.\n\n{link}\n\nThe agent can still read the outcome (the operation stays in "
        f"its open list until acknowledged); check the agent's callback endpoint.\n\n{why}"
    )
    sent = []
    if settings.NOTIFY_EMAILS:
        subject = ascii_subject(f"[pollerdash] Callback not delivered: {operation_id}")
        try:
            send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, list(settings.NOTIFY_EMAILS))
            sent.append("email")
        except Exception as exc:  # noqa: BLE001 - one failed channel must not stop the other
            logger.warning("callback %s: notification email failed (%s)", delivery_id, type(exc).__name__)
    chat = f"*Callback not delivered* for <{link}|{operation_id}>\n{slack_escaped(why)}"
    if settings.NOTIFY_WEBHOOK_URL and _post_webhook(url=settings.NOTIFY_WEBHOOK_URL, chat=chat, link=link):
        sent.append("webhook")
    return "sent: " + (", ".join(sent) or "nothing (every channel failed)")


def hourly_slot() -> bool:
    """Take one of the NOTIFY_MAX_PER_HOUR messages to people (cards and failed callbacks alike)."""
    limit = settings.NOTIFY_MAX_PER_HOUR
    if limit <= 0:
        return True
    return ratelimit.take(key="notifications", limit=limit, window_s=3600, now=timezone.now()) is None


def _post_webhook(*, url: str, chat: str, link: str) -> bool:
    """POST `{"text": ...}` (Slack-compatible) plus a structured copy; True on a 2xx answer."""
    register_secret(url)
    payload = {"text": chat, "pollerdash": {"event": "escalation.callback_failed", "url": link}}
    try:
        with httpx.Client(timeout=WEBHOOK_TIMEOUT, follow_redirects=False, trust_env=False) as client:
            response = client.post(url, json=payload)
    except httpx.HTTPError as exc:
        logger.warning("notification webhook failed (%s)", type(exc).__name__)
        return False
    if not 200 <= response.status_code < 300:
        logger.warning("notification webhook answered HTTP %s", response.status_code)
        return False
    return True
