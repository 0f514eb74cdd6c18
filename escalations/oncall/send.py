"""Sending one notification row (the worker's task): the one sending path of every message.

Every message is a row: a policy's levels and reminders, hand-overs, take-overs, an acceptance to
confirm, follow-ups, the answer to a click in Slack, and the messages about no card (a callback
that gave up, a business deadline near). The worker charges the attempt, checks it is still due,
builds the message (escalations.oncall.messages), hands it to its channel
(escalations.oncall.channels.registry) and records what the channel says: sent, retry or failed.

Every row ends sent, failed or skipped, with its reason: a receiver's 4xx is failed and not retried;
429, 5xx and no answer are retried on the schedule of operations.notify.rules; a message to people
beyond NOTIFY_MAX_PER_CARD or an hourly cap (escalations.oncall.caps) is skipped, not sent
(follow-ups that close what was sent are never held back, nor are a new card's first page and the
pages a receiver folds into one alert, by the hourly caps).

Secrets (webhook URLs, routing keys, the bot token) are read from the environment variables the
targets name, at send time, registered with the log scrubber before use, and never stored: a
row's `detail` is the outcome in words, scrubbed again before it is written.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from escalations.oncall import caps, notices, outbox
from escalations.oncall.channels import registry
from escalations.oncall.channels.base import Channel, Unsendable, Verdict
from escalations.oncall.messages import message_of, sent_to_people
from operations.infrastructure.redaction import redact
from operations.models import Escalation, NotificationDelivery, PolicyRun
from operations.notify.kinds import Kind
from operations.notify.rules import TO_PEOPLE, Event, State

logger = logging.getLogger(__name__)


def deliver(*, delivery_id: int, attempt: int) -> str:
    """Send attempt `attempt` (0-based) of one row, at most once. Returns what happened."""
    now = timezone.now()
    if not outbox.charge(delivery_id=delivery_id, attempt=attempt, now=now):
        return "stale"
    row = NotificationDelivery.objects.select_related(
        "escalation__operation__provider", "operation__provider", "caused_by"
    ).get(pk=delivery_id)
    channel = registry.channel(Kind(row.channel))
    about = f"card {row.escalation_id}" if row.escalation_id is not None else f"operation {row.operation_id}"
    if row.event in TO_PEOPLE:
        held = _held_back(row, channel=channel, now=now)
        if held:
            _count(row, skipped=True)
            outbox.finish(delivery=row, state=State.SKIPPED, detail=held, now=now)
            logger.info("notification %s (%s) skipped: %s", row.pk, about, held)
            return "skipped"
    try:
        outcome = channel.deliver(message_of(row, now=now))
    except Unsendable as exc:
        outbox.finish(delivery=row, state=State.FAILED, detail=redact(str(exc)), now=now)
        logger.warning("notification %s (%s, %s) failed: %s", row.pk, about, row.display, exc)
        return "failed"
    detail = redact(outcome.detail)
    if outcome.verdict is Verdict.SENT:
        outbox.finish(
            delivery=row,
            state=State.SENT,
            detail=detail,
            now=now,
            http_status=outcome.http_status,
            provider_ref=outcome.provider_ref,
        )
        if row.event in TO_PEOPLE:
            _count(row, skipped=False)
        logger.debug("notification %s (%s, %s %s): sent", row.pk, about, row.event, row.display)
        return "sent"
    if outcome.verdict is Verdict.FAILED:
        outbox.finish(delivery=row, state=State.FAILED, detail=detail, now=now, http_status=outcome.http_status)
        logger.warning("notification %s (%s, %s) failed: %s", row.pk, about, row.display, detail)
        return "failed"
    result = outbox.retry_later(
        delivery=row, detail=detail, now=now, http_status=outcome.http_status, retry_after_s=outcome.retry_after_s
    )
    logger.info("notification %s (%s, %s): %s (%s)", row.pk, about, row.display, result, detail)
    return result


def _held_back(row: NotificationDelivery, *, channel: Channel, now: datetime) -> str:
    """Why a message to people is not sent after all (closed, acknowledged, no longer due, a cap), or ""."""
    one_alert = channel.one_alert_per_card
    if row.escalation is None:
        return notices.why_not_due(row) or caps.hold(row, one_alert_per_card=one_alert, now=now)
    escalation = row.escalation
    if escalation.state != Escalation.State.OPEN:
        return "the card was closed before it was sent"
    if row.event == Event.LEVEL and not channel.follow_ups:
        # A retry still due when someone acknowledged: nobody needs it any more. A PagerDuty
        # trigger or a Slack-app post goes out all the same, since its acknowledge follows it.
        status = PolicyRun.objects.filter(pk=escalation.pk).values_list("status", flat=True).first()
        if status == PolicyRun.Status.ACKNOWLEDGED:
            return "acknowledged before it was sent"
    per_card = settings.NOTIFY_MAX_PER_CARD
    if per_card > 0 and sent_to_people(escalation.pk) >= per_card:
        return f"NOTIFY_MAX_PER_CARD ({per_card}) reached"
    return caps.hold(row, one_alert_per_card=one_alert, now=now)


def _count(row: NotificationDelivery, *, skipped: bool) -> None:
    """The card's own count of messages sent and held back (messages about no card have none)."""
    if row.escalation_id is None:
        return
    field = "notifications_skipped" if skipped else "notifications_sent"
    Escalation.objects.filter(pk=row.escalation_id).update(**{field: F(field) + 1})
