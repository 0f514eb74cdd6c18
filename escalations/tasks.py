"""django-q2 entry points for escalations: thin adapters over escalations.notifications."""

from __future__ import annotations

from django.utils import timezone

from escalations import notifications


def notify_escalation(escalation_id: int, kind: str) -> str:
    """Send one card's notification (opened or reminder) by email and webhook."""
    return notifications.deliver(escalation_id=escalation_id, kind=kind)


def send_due_reminders() -> int:
    """Run by the "pollerdash: escalation reminders" Schedule every minute."""
    return notifications.enqueue_due_reminders(now=timezone.now())


def notify_callback_failed(operation_id: str, delivery_id: str, event_type: str, reason: str) -> str:
    """Tell on-call that an agent's callback gave up (operations.events.callback_undeliverable)."""
    return notifications.deliver_callback_failure(
        operation_id=operation_id, delivery_id=delivery_id, event_type=event_type, reason=reason
    )


def notify_people(escalation_id: int, kind: str, actor_id: int | None, recipient_ids: list[int]) -> str:
    """Tell named people about a card: handed to them, taken over from them, or awaiting a second
    responder (operations.events receivers in escalations.notifications)."""
    return notifications.deliver_to_people(
        escalation_id=escalation_id, kind=kind, actor_id=actor_id, recipient_ids=recipient_ids
    )


def notify_business_deadline(operation_id: str) -> str:
    """Warn on-call that an operation's business deadline is near (operations.events.business_deadline_near)."""
    return notifications.deliver_business_deadline_warning(operation_id=operation_id)
