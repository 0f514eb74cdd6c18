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
