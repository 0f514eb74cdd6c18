"""A card as the dashboard shows it: the card (operations.cards.card) with every decision taken on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from escalations.selectors.notifications import Notified, card_notifications
from operations.cards.card import Card, load_card, reason_label
from operations.models import CardActivity, Decision, Escalation, Operation
from operations.responders import responders
from operations.vocabulary import Reason

RUN_STATUSES = ("", "running", "acknowledged", "exhausted", "ended")
REASONS = [(reason.value, reason_label(reason.value)) for reason in Reason]


@dataclass(frozen=True)
class CardView:
    card: Card
    decisions: list[Decision]
    notified: Notified
    # Acknowledgements, hand-overs and notes, oldest first.
    activities: list[CardActivity] = field(default_factory=list)
    # Open cards: the responders it can be handed to (everyone but its holder).
    reassign_to: list[str] = field(default_factory=list)

    @property
    def etag(self) -> str:
        """Changes whenever anything on the card changes (version, a new recorded look or attempt,
        who holds it, a note, a notification sent, failed or skipped, a policy step)."""
        last = self.decisions[-1].pk if self.decisions else 0
        activity = self.activities[-1].pk if self.activities else 0
        told = self.notified
        settled = sum(1 for line in told.lines if line.state != "pending")
        step = RUN_STATUSES.index(told.status) if told.status in RUN_STATUSES else 0
        return f"{self.card.escalation.version}.{last}.{activity}.{len(told.lines)}.{settled}.{step}"

    @property
    def notes(self) -> list[CardActivity]:
        # Notes, and what a channel reported that changed nothing (a notice), in one thread.
        return [a for a in self.activities if a.kind in (CardActivity.Kind.NOTE, CardActivity.Kind.NOTICE)]


def card_view(*, escalation: Escalation, now: datetime) -> CardView:
    """The card of an escalation loaded with its operation and provider: six more queries."""
    decisions = list(Decision.objects.filter(escalation=escalation).order_by("decided_at", "pk"))
    activities = list(CardActivity.objects.filter(escalation=escalation).order_by("at", "pk"))
    card = load_card(escalation=escalation, operation=escalation.operation, now=now, decisions=decisions)
    choices = reassign_choices(escalation=escalation) if card.is_open else []
    # A card that joined a group shows who the group's first card reached (the group is told once).
    first = escalation.group.first_card_id if escalation.group_id is not None and escalation.group else None
    notified = card_notifications(escalation_id=escalation.pk, group_first_card_id=first)
    return CardView(card=card, decisions=decisions, notified=notified, activities=activities, reassign_to=choices)


def card_by_id(*, escalation_id: int, now: datetime) -> CardView | None:
    escalation = (
        Escalation.objects.select_related("operation__provider", "assignee", "acknowledged_by", "assigned_by", "group")
        .filter(pk=escalation_id)
        .first()
    )
    return None if escalation is None else card_view(escalation=escalation, now=now)


def reassign_choices(*, escalation: Escalation) -> list[str]:
    """Usernames a card can be handed to: active responders other than its holder."""
    names = responders().values_list("username", flat=True)
    if escalation.assignee_id is not None:
        names = names.exclude(pk=escalation.assignee_id)
    return list(names)


def operation_cards(*, operation: Operation, now: datetime) -> tuple[CardView | None, list[Escalation]]:
    """The operation's open card (if any) and all its escalations, newest first."""
    escalations = list(
        Escalation.objects.filter(operation=operation)
        .select_related("assignee", "acknowledged_by", "assigned_by", "group")
        .order_by("-opened_at")
    )
    current = next((e for e in escalations if e.state == Escalation.State.OPEN), None)
    if current is None:
        return None, escalations
    current.operation = operation
    return card_view(escalation=current, now=now), escalations
