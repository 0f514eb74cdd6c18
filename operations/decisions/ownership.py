"""Holding a card and writing on it, checked, then written through operations.lifecycle.ownership.

The checks the lifecycle leaves to its callers live here: taking over a card someone else holds
needs the person to have confirmed that very holder (the page names them; if the card changed hands
meanwhile they are asked again), a hand-over names an existing account, and each person's acts are
rate-limited like decisions (DECISIONS_PER_MINUTE, counted apart from decisions) so a stuck or
hostile client cannot flood the audit chain. Every refusal writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from operations import ratelimit
from operations.decisions.services import TooManyDecisions
from operations.lifecycle import ownership
from operations.lifecycle.ownership import CardNotOpen, InvalidNote, NotAResponder, NotHolder, OwnershipRefused
from operations.models import CardActivity, Escalation

if TYPE_CHECKING:
    from django.contrib.auth.models import User

__all__ = [
    "CardNotOpen",
    "InvalidNote",
    "NotAResponder",
    "NotHolder",
    "OwnershipRefused",
    "TakeoverNeeded",
    "acknowledge_group",
    "card_acknowledge",
    "card_note",
    "card_reassign",
    "card_unacknowledge",
]


class TakeoverNeeded(OwnershipRefused):
    """Someone else holds the card: the person must confirm taking it over from them, by name."""

    status = 409

    def __init__(self, escalation: Escalation) -> None:
        holder = escalation.assignee.get_username() if escalation.assignee else "someone"
        super().__init__(
            f"{holder} holds this card. Confirm that you take it over from {holder} ({holder} will be told).",
            escalation=escalation,
        )
        self.holder = holder


def _take_slot(user: User) -> None:
    """One of the person's DECISIONS_PER_MINUTE card acts (kept apart from their decisions)."""
    if settings.DECISIONS_PER_MINUTE <= 0:
        return
    wait_s = ratelimit.take(
        key=f"card-acts:user:{user.pk}",
        limit=settings.DECISIONS_PER_MINUTE,
        window_s=60,
        now=timezone.now(),
    )
    if wait_s is not None:
        raise TooManyDecisions(retry_after_s=wait_s)


def card_acknowledge(*, escalation_id: int, user: User, takeover_of: object = None) -> Escalation:
    """ "I'm on it". When someone else holds the card, `takeover_of` must name that holder (their user
    id, as the page showed them); otherwise TakeoverNeeded asks again and nothing is written."""
    _take_slot(user)
    with transaction.atomic():
        escalation = Escalation.objects.select_for_update(of=("self",)).select_related("assignee").get(pk=escalation_id)
        holder_id = escalation.assignee_id
        if (
            escalation.state == Escalation.State.OPEN
            and holder_id is not None
            and holder_id != getattr(user, "pk", None)
            and str(takeover_of or "") != str(holder_id)
        ):
            raise TakeoverNeeded(escalation)
        return ownership.acknowledge(escalation_id=escalation_id, user=user, now=timezone.now())


def card_unacknowledge(*, escalation_id: int, user: User) -> Escalation:
    """The holder gives the card back (NotHolder for anyone else)."""
    _take_slot(user)
    return ownership.unacknowledge(escalation_id=escalation_id, user=user, now=timezone.now())


def card_reassign(*, escalation_id: int, by: User, to: object) -> Escalation:
    """Hand the card to the responder named `to` (a username); NotAResponder names a refusal."""
    _take_slot(by)
    name = to.strip()[:150] if isinstance(to, str) else ""
    if not name:
        raise NotAResponder("to: choose the responder to hand the card to.")
    target = get_user_model().objects.filter(username=name).first()
    if target is None:
        raise NotAResponder(f"to: there is no account named {name!r}.")
    if Escalation.objects.filter(pk=escalation_id, assignee=target, state=Escalation.State.OPEN).exists():
        raise OwnershipRefused(f"to: {name} already holds this card; nothing was changed.")
    return ownership.reassign(escalation_id=escalation_id, by=by, to=target, now=timezone.now())


def card_note(*, escalation_id: int, user: User, text: object) -> CardActivity:
    """A note in the card's thread (InvalidNote names what is wrong with the text)."""
    note = ownership.clean_note(text=text)
    _take_slot(user)
    return ownership.add_note(escalation_id=escalation_id, user=user, text=note, now=timezone.now())


def acknowledge_group(*, group_id: int, user: User) -> tuple[int, list[str]]:
    """Acknowledge every open card of a group that nobody else holds (one act against the limit).

    Returns how many cards became the person's and the names of those who hold the others: a card
    someone else holds is taken over on the card itself, never in bulk.
    """
    _take_slot(user)
    user_id = getattr(user, "pk", None)
    acknowledged, others = 0, set()
    cards = Escalation.objects.filter(group_id=group_id, state=Escalation.State.OPEN).select_related("assignee")
    for escalation in cards.order_by("opened_at", "pk"):
        if escalation.assignee_id not in (None, user_id):
            # assignee_id is set, so the assignee is there (mypy does not tie the two fields).
            others.add(escalation.assignee.get_username())  # type: ignore[union-attr]
            continue
        if escalation.acknowledged_by_id == user_id:
            continue
        try:
            ownership.acknowledge(escalation_id=escalation.pk, user=user, now=timezone.now())
        except OwnershipRefused:
            continue  # decided meanwhile
        acknowledged += 1
    return acknowledged, sorted(others)
