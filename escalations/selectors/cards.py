"""A card as the dashboard shows it: the card (operations.decisions.cards) with every decision taken on it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from escalations.selectors.notifications import Notified, card_notifications
from operations.decisions.cards import Card, load_card, reason_label
from operations.models import Decision, Escalation, Operation
from operations.vocabulary import Reason

RUN_STATUSES = ("", "running", "acknowledged", "exhausted", "ended")
REASONS = [(reason.value, reason_label(reason.value)) for reason in Reason]


@dataclass(frozen=True)
class CardView:
    card: Card
    decisions: list[Decision]
    notified: Notified

    @property
    def etag(self) -> str:
        """Changes whenever anything on the card changes (version, a new recorded look/attempt, a
        notification sent, failed or skipped, a policy step)."""
        last = self.decisions[-1].pk if self.decisions else 0
        told = self.notified
        settled = sum(1 for line in told.lines if line.state != "pending")
        step = RUN_STATUSES.index(told.status) if told.status in RUN_STATUSES else 0
        return f"{self.card.escalation.version}.{last}.{len(told.lines)}.{settled}.{step}"


def card_view(*, escalation: Escalation, now: datetime) -> CardView:
    """The card of an escalation loaded with its operation and provider: six more queries."""
    decisions = list(Decision.objects.filter(escalation=escalation).order_by("decided_at", "pk"))
    card = load_card(escalation=escalation, operation=escalation.operation, now=now, decisions=decisions)
    return CardView(card=card, decisions=decisions, notified=card_notifications(escalation_id=escalation.pk))


def card_by_id(*, escalation_id: int, now: datetime) -> CardView | None:
    escalation = Escalation.objects.select_related("operation__provider", "assignee").filter(pk=escalation_id).first()
    return None if escalation is None else card_view(escalation=escalation, now=now)


def operation_cards(*, operation: Operation, now: datetime) -> tuple[CardView | None, list[Escalation]]:
    """The operation's open card (if any) and all its escalations, newest first."""
    escalations = list(Escalation.objects.filter(operation=operation).select_related("assignee").order_by("-opened_at"))
    current = next((e for e in escalations if e.state == Escalation.State.OPEN), None)
    if current is None:
        return None, escalations
    current.operation = operation
    return card_view(escalation=current, now=now), escalations
