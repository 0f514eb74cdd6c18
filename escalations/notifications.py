"""Messages to on-call that are not cards: a completion callback that gave up, a business deadline near.

Cards reach people through their escalation policy (escalations.oncall). A callback that could not
be delivered is not a card (the operation may be done), nor is the early warning that a business
deadline is near while the job still runs; each is one message to NOTIFY_EMAILS and
NOTIFY_WEBHOOK_URL, queued in the transaction that recorded it (escalations.oncall.receivers) and
sent by a worker (escalations.tasks, with the functions here). It carries
pollerdash's link first and quotes the agent's callback address as defanged data after it;
every message to people counts against NOTIFY_MAX_PER_HOUR (escalations.oncall.caps). The webhook
URL is a secret: it is registered with the log redactor and never logged.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse
from django.utils import timezone

from escalations.agent_text import quoted, slack_escaped
from escalations.oncall import caps, transport
from escalations.oncall.email import ascii_subject
from operations.decisions.options import human_duration
from operations.models import Operation
from operations.redaction import register_secret
from operations.vocabulary import POLLABLE_STATUSES

logger = logging.getLogger(__name__)


def deliver_callback_failure(*, operation_id: str, delivery_id: str, event_type: str, reason: str) -> str:
    """Tell on-call that an agent's callback endpoint gave up. Returns a short outcome."""
    if not caps.global_slot(now=timezone.now()):
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
    return _send(
        subject=f"[pollerdash] Callback not delivered: {operation_id}",
        text=text,
        chat=f"*Callback not delivered* for <{link}|{operation_id}>\n{slack_escaped(why)}",
        link=link,
        event="callback_failed",
        what=f"callback {delivery_id}",
    )


def deliver_business_deadline_warning(*, operation_id: str) -> str:
    """Tell on-call that a business deadline is near while the job still runs: a notification, not a card.

    Counted against NOTIFY_MAX_PER_HOUR; skipped when the operation finished or went to a human
    meanwhile (the card says it all then).
    """
    op = Operation.objects.select_related("provider").filter(pk=operation_id).first()
    if op is None or op.status not in POLLABLE_STATUSES or op.business_deadline_at is None:
        return "skipped: the operation is no longer being watched"
    if not caps.global_slot(now=timezone.now()):
        logger.warning(
            "operation %s: business deadline warning skipped, NOTIFY_MAX_PER_HOUR (%s) reached",
            operation_id,
            settings.NOTIFY_MAX_PER_HOUR,
        )
        return f"skipped: NOTIFY_MAX_PER_HOUR ({settings.NOTIFY_MAX_PER_HOUR}) reached"
    now = timezone.now()
    link = f"{settings.SITE_URL}{reverse('operation_detail', args=[op.pk])}"
    business = _utc(op.business_deadline_at)
    left = human_duration(op.business_deadline_at - now) if op.business_deadline_at > now else "moments"
    job_id = f"Provider job id (from the agent): {quoted(op.provider_job_id)}"
    purpose = f"Purpose (from the agent): {quoted(op.purpose) if op.purpose else '—'}"
    text = "\n".join(
        [
            f"The business deadline of operation {op.pk} is {business} (in {left}) and its job is still running.",
            "",
            f"Operation: {link}",
            "",
            "Nothing to decide now: pollerdash keeps polling until then. If the job has not finished by the "
            "business deadline, polling stops and a card asks whether the result is still wanted.",
            "",
            f"Provider:           {op.provider.slug}",
            f"Requests used:      {op.status_requests_used} of {op.max_status_requests}",
            f"Business deadline:  {business}",
            f"Technical deadline: {_utc(op.deadline_at)}",
            "",
            "Supplied when the job was registered, not written by pollerdash (links disabled):",
            job_id,
            purpose,
        ]
    )
    return _send(
        subject=f"[pollerdash] Business deadline in {left}: {op.provider.slug} ({op.pk})",
        text=text,
        chat=(
            f"*Business deadline in {slack_escaped(left)}* ({slack_escaped(business)})"
            f" for <{link}|{slack_escaped(op.pk)}> · {slack_escaped(op.provider.slug)}"
            " · job still running; polling stops then and a card asks"
            f"\n{slack_escaped(purpose)} · {slack_escaped(job_id)}"
        ),
        link=link,
        event="business_deadline_near",
        what=f"operation {op.pk}",
    )


def _send(*, subject: str, text: str, chat: str, link: str, event: str, what: str) -> str:
    """One message by email and the webhook; a failed channel does not stop the other."""
    sent = []
    if settings.NOTIFY_EMAILS:
        try:
            send_mail(ascii_subject(subject), text, settings.DEFAULT_FROM_EMAIL, list(settings.NOTIFY_EMAILS))
            sent.append("email")
        except Exception as exc:  # noqa: BLE001 - one failed channel must not stop the other
            logger.warning("%s: notification email failed (%s)", what, type(exc).__name__)
    if settings.NOTIFY_WEBHOOK_URL and _post_webhook(
        url=settings.NOTIFY_WEBHOOK_URL, chat=chat, link=link, event=event
    ):
        sent.append("webhook")
    return "sent: " + (", ".join(sent) or "nothing (every channel failed)")


def _utc(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def _post_webhook(*, url: str, chat: str, link: str, event: str) -> bool:
    """POST `{"text": ...}` (Slack-compatible) plus a structured copy; True on a 2xx answer.

    Through the notification channels' one bounded POST (escalations.oncall.transport): the same URL
    rules as the policy's webhooks, `identity` asked, a compressed answer never inflated, at most
    64 KiB of it read."""
    register_secret(url)
    problem = transport.url_problem(url, what="NOTIFY_WEBHOOK_URL")
    if problem:
        logger.warning("notification webhook not sent: %s", problem)
        return False
    payload = {"text": chat, "pollerdash": {"event": f"escalation.{event}", "url": link}}
    answer = transport.post(url, body=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    if answer.status is None:
        logger.warning("notification webhook failed (%s)", answer.transport_error)
        return False
    if not 200 <= answer.status < 300:
        logger.warning("notification webhook answered HTTP %s", answer.status)
        return False
    return True
