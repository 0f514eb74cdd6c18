"""django-q2 entry points for escalations: thin adapters over escalations.oncall and notifications."""

from __future__ import annotations

from escalations import notifications
from escalations.oncall import send


def deliver_notification(delivery_id: int, attempt: int) -> str:
    """Send one attempt of one notification row (claimed by the dispatcher)."""
    return send.deliver(delivery_id=delivery_id, attempt=attempt)


def notify_escalation(escalation_id: int, kind: str) -> str:
    """Tasks queued by the version before escalation policies, still in the queue during an upgrade:
    the card's policy run tells people now (escalations.oncall), so these do nothing."""
    return "superseded by escalation policies"


def notify_callback_failed(operation_id: str, delivery_id: str, event_type: str, reason: str) -> str:
    """Tell on-call that an agent's callback gave up (operations.events.callback_undeliverable)."""
    return notifications.deliver_callback_failure(
        operation_id=operation_id, delivery_id=delivery_id, event_type=event_type, reason=reason
    )


def notify_business_deadline(operation_id: str) -> str:
    """Warn on-call that an operation's business deadline is near (operations.events.business_deadline_near)."""
    return notifications.deliver_business_deadline_warning(operation_id=operation_id)
