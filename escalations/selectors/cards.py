"""A card as the dashboard shows it: the card (operations.decisions.cards) with every decision taken on it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from operations.decisions.cards import Card, load_card, reason_label
from operations.models import Decision, Escalation, Operation
from operations.vocabulary import Reason

REASONS = [(reason.value, reason_label(reason.value)) for reason in Reason]


@dataclass(frozen=True)
class CardView:
    card: Card
    decisions: list[Decision]

    @property
    def etag(self) -> str:
        """Changes whenever anything on the card changes (version, or a new recorded look/attempt)."""
        last = self.decisions[-1].pk if self.decisions else 0
        return f"{self.card.escalation.version}.{last}"


def card_view(*, escalation: Escalation, now: datetime) -> CardView:
    """The card of an escalation loaded with its operation and provider: four more queries."""
    decisions = list(Decision.objects.filter(escalation=escalation).order_by("decided_at", "pk"))
    card = load_card(escalation=escalation, operation=escalation.operation, now=now, decisions=decisions)
    return CardView(card=card, decisions=decisions)


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
