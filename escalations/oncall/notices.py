"""Messages to on-call about an operation, not a card: a completion callback that gave up, and the
early warning that a business deadline is near while the job still runs.

Neither is a card (the operation may be done; nothing is to be decided), so neither follows a
policy: each goes to NOTIFY_EMAILS and NOTIFY_WEBHOOK_URL, as these messages always did. They are
outbox rows like every other message (one per recipient, naming the operation instead of a card),
written in the transaction that recorded the event (escalations.oncall.receivers) and sent by the
workers through the channels (escalations.oncall.send): retried on 429, 5xx and silence, counted
against NOTIFY_MAX_PER_HOUR, and recorded sent, failed or skipped with the reason. The agent's
words (its callback address in the reason, its job id and purpose) are quoted and defanged, after
pollerdash's link to the operation.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Max
from django.urls import reverse

from escalations.agent_text import quoted
from escalations.oncall.facts import Notice
from operations.cards.options import human_duration
from operations.models import NotificationDelivery, Operation
from operations.notify.kinds import LABELS, Kind
from operations.notify.rules import Event
from operations.notify.store import LEGACY_WEBHOOK_ENV
from operations.vocabulary import POLLABLE_STATUSES

REASON_MAX = 300
NOT_WATCHED = "the operation is no longer being watched"


def queue_callback_failed(
    *, operation_id: str, callback_id: str, event_type: str, reason: str, now: datetime
) -> list[NotificationDelivery]:
    """An agent's callback gave up: on-call is told (the callback's id, its event type and why)."""
    note = f"{callback_id} {event_type}\n{reason[:REASON_MAX]}"
    return _queue(operation_id=operation_id, event=Event.CALLBACK_FAILED, note=note, now=now)


def queue_business_deadline(*, operation_id: str, now: datetime) -> list[NotificationDelivery]:
    """A business deadline is near: on-call is warned, once per operation (the lifecycle claims it)."""
    return _queue(operation_id=operation_id, event=Event.BUSINESS_DEADLINE_NEAR, note="", now=now)


def _queue(*, operation_id: str, event: Event, note: str, now: datetime) -> list[NotificationDelivery]:
    recipients = [(Kind.EMAIL, address, address) for address in dict.fromkeys(settings.NOTIFY_EMAILS)]
    if settings.NOTIFY_WEBHOOK_URL:
        recipients.append((Kind.SLACK_WEBHOOK, LEGACY_WEBHOOK_ENV, LABELS[Kind.SLACK_WEBHOOK]))
    if not recipients:
        return []
    # Written under the operation's row lock (the event's own transaction), so the count is exact.
    earlier = NotificationDelivery.objects.filter(operation_id=operation_id, escalation=None, event=event)
    repetition = (earlier.aggregate(last=Max("repetition"))["last"] or 0) + 1
    return NotificationDelivery.objects.bulk_create(
        NotificationDelivery(
            operation_id=operation_id,
            round=0,
            level=-1,
            repetition=repetition,
            channel=str(kind),
            address=address,
            display=display[:150],
            event=event,
            next_attempt_at=now,
            created_at=now,
            note=note,
        )
        for kind, address, display in recipients
    )


def why_not_due(row: NotificationDelivery) -> str:
    """Why a message about an operation is not sent after all ("" when it is still due): a business
    deadline's warning whose job finished or went to a person meanwhile (the card says it all then)."""
    if row.event != Event.BUSINESS_DEADLINE_NEAR:
        return ""
    op = row.operation
    if op is None or op.status not in POLLABLE_STATUSES or op.business_deadline_at is None:
        return NOT_WATCHED
    return ""


def notice_of(row: NotificationDelivery, *, now: datetime) -> Notice:
    """The message a row about an operation carries, in words read now."""
    op = row.operation
    if op is None:
        raise ValueError(f"notification {row.pk} is about no operation")
    link = f"{settings.SITE_URL}{reverse('operation_detail', args=[op.pk])}"
    if row.event == Event.CALLBACK_FAILED:
        return _callback_failed(row, op=op, link=link)
    return _business_deadline(op, link=link, now=now)


def _callback_failed(row: NotificationDelivery, *, op: Operation, link: str) -> Notice:
    head, _, reason = row.note.partition("\n")
    callback_id, _, event_type = head.partition(" ")
    return Notice(
        event=str(Event.CALLBACK_FAILED),
        title="Callback not delivered",
        subject=f"Callback not delivered: {op.pk}",
        operation_id=op.pk,
        link=link,
        opening=f"pollerdash could not deliver the {event_type} callback {callback_id} of operation {op.pk}.",
        paragraphs=(
            "The agent can still read the outcome (the operation stays in its open list until acknowledged); "
            "check the agent's callback endpoint.",
        ),
        quoted=(f"Why (may quote the agent's callback address; links disabled): {quoted(reason)}",),
    )


def _business_deadline(op: Operation, *, link: str, now: datetime) -> Notice:
    business_at = op.business_deadline_at or now
    business = _utc(business_at)
    left = human_duration(business_at - now) if business_at > now else "moments"
    return Notice(
        event=str(Event.BUSINESS_DEADLINE_NEAR),
        title=f"Business deadline in {left}",
        subject=f"Business deadline in {left}: {op.provider.slug} ({op.pk})",
        operation_id=op.pk,
        link=link,
        opening=f"The business deadline of operation {op.pk} is {business} (in {left}) and its job is still running.",
        summary=f"{business} · {op.provider.slug} · job still running; polling stops then and a card asks",
        paragraphs=(
            "Nothing to decide now: pollerdash keeps polling until then. If the job has not finished by the "
            "business deadline, polling stops and a card asks whether the result is still wanted.",
        ),
        facts=(
            ("Provider", op.provider.slug),
            ("Requests used", f"{op.status_requests_used} of {op.max_status_requests}"),
            ("Business deadline", business),
            ("Technical deadline", _utc(op.deadline_at)),
        ),
        quoted_intro="Supplied when the job was registered, not written by pollerdash (links disabled):",
        quoted=(
            f"Provider job id (from the agent): {quoted(op.provider_job_id)}",
            f"Purpose (from the agent): {quoted(op.purpose) if op.purpose else '—'}",
        ),
    )


def _utc(value: datetime | None) -> str:
    return "none" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
