"""django-q2 entry points for escalations: thin adapters over escalations.oncall."""

from __future__ import annotations

from django.utils import timezone

from escalations.oncall import notices, send
from operations.models import Operation


def deliver_notification(delivery_id: int, attempt: int) -> str:
    """Send one attempt of one notification row (claimed by the dispatcher)."""
    return send.deliver(delivery_id=delivery_id, attempt=attempt)


def notify_escalation(escalation_id: int, kind: str) -> str:
    """Tasks queued by the version before escalation policies, still in the queue during an upgrade:
    the card's policy run tells people now (escalations.oncall), so these do nothing."""
    return "superseded by escalation policies"


def notify_callback_failed(operation_id: str, delivery_id: str, event_type: str, reason: str) -> str:
    """Tasks queued by the version before 2.5 (which sent these messages from the task itself), still in
    the queue during an upgrade: the message becomes outbox rows, sent like every other."""
    if not Operation.objects.filter(pk=operation_id).exists():
        return "skipped: the operation no longer exists"
    rows = notices.queue_callback_failed(
        operation_id=operation_id, callback_id=delivery_id, event_type=event_type, reason=reason, now=timezone.now()
    )
    return f"queued: {len(rows)} message(s)"


def notify_business_deadline(operation_id: str) -> str:
    """As notify_callback_failed, for a business deadline's early warning queued before 2.5."""
    if not Operation.objects.filter(pk=operation_id).exists():
        return "skipped: the operation no longer exists"
    rows = notices.queue_business_deadline(operation_id=operation_id, now=timezone.now())
    return f"queued: {len(rows)} message(s)"
