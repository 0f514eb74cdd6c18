"""Holding a card and writing on it, checked, then written through operations.lifecycle.ownership.

The checks the lifecycle leaves to its callers live here: taking over a card someone else holds
needs the person to have confirmed that very holder (the page names them; if the card changed hands
meanwhile they are asked again), a hand-over names an existing account, and each person's acts are
rate-limited like decisions (DECISIONS_PER_MINUTE, counted apart from decisions) so a stuck or
hostile client cannot flood the audit chain. Every refusal writes nothing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from operations.decisions.services import TooManyDecisions
from operations.lifecycle import notes, ownership
from operations.lifecycle.ownership import CardNotOpen, InvalidNote, NotAResponder, NotHolder, OwnershipRefused
from operations.limits import ratelimit
from operations.models import CardActivity, Escalation
from operations.notify.rules import SNOOZE_MINUTES, snooze_choices
from operations.responders import is_responder
from operations.vocabulary import CONTROL_CHARACTERS, Channel, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

__all__ = [
    "CardNotOpen",
    "InvalidNote",
    "NotAResponder",
    "NotHolder",
    "OwnershipRefused",
    "SNOOZE_MINUTES",
    "SnoozeRefused",
    "TakeoverNeeded",
    "acknowledge_group",
    "card_acknowledge",
    "card_note",
    "card_reassign",
    "card_snooze",
    "card_unacknowledge",
    "snooze_choices",
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


class SnoozeRefused(OwnershipRefused):
    """A snooze the card does not offer: not one of SNOOZE_MINUTES, or ending after the operation's
    deadline (reminders must never be silent when the job's watch ends)."""


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


def _locked(escalation_id: int) -> Escalation:
    return Escalation.objects.select_for_update(of=("self",)).select_related("assignee").get(pk=escalation_id)


def _held_by_other(escalation: Escalation, user: User) -> bool:
    return escalation.state == Escalation.State.OPEN and escalation.assignee_id not in (None, getattr(user, "pk", None))


def _take_over(
    escalation: Escalation, *, user: User, takeover_of: object, channel: str, channel_identity: str
) -> Escalation:
    """With the card locked: acknowledge it for `user`, unless someone else holds it and `takeover_of`
    does not name that very holder (then TakeoverNeeded asks again and nothing is written)."""
    if _held_by_other(escalation, user) and str(takeover_of or "") != str(escalation.assignee_id):
        raise TakeoverNeeded(escalation)
    return ownership.acknowledge(
        escalation_id=escalation.pk,
        user=user,
        now=timezone.now(),
        channel=channel,
        channel_identity=channel_identity,
    )


def card_acknowledge(
    *,
    escalation_id: int,
    user: User,
    takeover_of: object = None,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Escalation:
    """ "I'm on it". When someone else holds the card, `takeover_of` must name that holder (their user
    id, as the page showed them); otherwise TakeoverNeeded asks again and nothing is written.
    `channel` and `channel_identity` (every act here takes them): where the act came from and the
    identity that channel verified, recorded on the CardActivity and its audit entry."""
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    _take_slot(user)
    with transaction.atomic():
        return _take_over(
            _locked(escalation_id), user=user, takeover_of=takeover_of, channel=known, channel_identity=identity
        )


def card_unacknowledge(
    *, escalation_id: int, user: User, channel: str = Channel.WEB, channel_identity: str = ""
) -> Escalation:
    """The holder gives the card back (NotHolder for anyone else)."""
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    _take_slot(user)
    return ownership.unacknowledge(
        escalation_id=escalation_id, user=user, now=timezone.now(), channel=known, channel_identity=identity
    )


def card_reassign(
    *,
    escalation_id: int,
    by: User,
    to: object,
    takeover_of: object = None,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Escalation:
    """Hand the card to the responder named `to` (a username); NotAResponder names a refusal.

    Only the holder (or anyone, while nobody holds it) hands a card on plainly. Handing a card
    someone else holds — to oneself or to a third person — is taking it over from them: the same
    confirmation (`takeover_of` names the holder, else TakeoverNeeded), recorded as a take-over, and
    the same message to the holder as a take-over, never a silent way around them.
    """
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    _take_slot(by)
    name = to.strip()[:150] if isinstance(to, str) else ""
    if not name or CONTROL_CHARACTERS.search(name):
        raise NotAResponder("to: choose the responder to hand the card to.")
    target = get_user_model().objects.filter(username=name).first()
    if target is None:
        raise NotAResponder(f"to: there is no account named {name!r}.")
    with transaction.atomic():
        escalation = _locked(escalation_id)
        if target.pk == getattr(by, "pk", None) and _held_by_other(escalation, by):
            return _take_over(escalation, user=by, takeover_of=takeover_of, channel=known, channel_identity=identity)
        if escalation.state == Escalation.State.OPEN and escalation.assignee_id == target.pk:
            raise OwnershipRefused(f"to: {name} already holds this card; nothing was changed.")
        takeover = _held_by_other(escalation, by)
        if takeover and not is_responder(target):
            # Refused either way: say the reason that stays true, not "confirm the take-over" first.
            raise NotAResponder(
                f"{name} cannot be handed a card: they do not have the responder role.", escalation=escalation
            )
        if takeover and str(takeover_of or "") != str(escalation.assignee_id):
            raise TakeoverNeeded(escalation)
        return ownership.reassign(
            escalation_id=escalation_id,
            by=by,
            to=target,
            now=timezone.now(),
            takeover=takeover,
            channel=known,
            channel_identity=identity,
        )


def card_note(
    *, escalation_id: int, user: User, text: object, channel: str = Channel.WEB, channel_identity: str = ""
) -> CardActivity:
    """A note in the card's thread (InvalidNote names what is wrong with the text)."""
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    note = notes.clean_note(text=text)
    _take_slot(user)
    return notes.add_note(
        escalation_id=escalation_id,
        user=user,
        text=note,
        now=timezone.now(),
        channel=known,
        channel_identity=identity,
    )


def card_snooze(
    *, escalation_id: int, user: User, minutes: object, channel: str = Channel.WEB, channel_identity: str = ""
) -> Escalation:
    """Silence the card's reminders for `minutes` (one of SNOOZE_MINUTES), never past the
    operation's deadline (SnoozeRefused, nothing written); a later snooze replaces an earlier one."""
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    _take_slot(user)
    chosen = int(minutes) if isinstance(minutes, int | str) and str(minutes).isdigit() and len(str(minutes)) < 5 else 0
    if chosen not in SNOOZE_MINUTES:
        raise SnoozeRefused("minutes: snooze for 15 min, 1 h or 4 h.")
    now = timezone.now()
    with transaction.atomic():
        escalation = Escalation.objects.select_related("operation").get(pk=escalation_id)
        if chosen not in snooze_choices(deadline_at=escalation.operation.deadline_at, now=now):
            raise SnoozeRefused(
                "minutes: a snooze may not end after the operation's deadline; choose a shorter one or decide now.",
                escalation=escalation,
            )
        return ownership.snooze(
            escalation_id=escalation_id,
            user=user,
            until=now + timedelta(minutes=chosen),
            minutes=chosen,
            now=now,
            channel=known,
            channel_identity=identity,
        )


def acknowledge_group(
    *, group_id: int, user: User, channel: str = Channel.WEB, channel_identity: str = ""
) -> tuple[int, list[str]]:
    """Acknowledge every open card of a group that nobody else holds (one act against the limit).

    Returns how many cards became the person's and the names of those who hold the others: a card
    someone else holds is taken over on the card itself, never in bulk. Who holds a card is read
    under the card's lock, so an acknowledgement that lands while the group is being acknowledged
    is never taken over.
    """
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    _take_slot(user)
    user_id = getattr(user, "pk", None)
    acknowledged, others = 0, set()
    cards = Escalation.objects.filter(group_id=group_id, state=Escalation.State.OPEN).order_by("opened_at", "pk")
    for escalation_id in cards.values_list("pk", flat=True):
        with transaction.atomic():
            escalation = _locked(escalation_id)
            if escalation.state != Escalation.State.OPEN:
                continue  # decided meanwhile
            if _held_by_other(escalation, user):
                # assignee_id is set, so the assignee is there (mypy does not tie the two fields).
                others.add(escalation.assignee.get_username())  # type: ignore[union-attr]
                continue
            if escalation.acknowledged_by_id == user_id:
                continue
            ownership.acknowledge(
                escalation_id=escalation.pk, user=user, now=timezone.now(), channel=known, channel_identity=identity
            )
        acknowledged += 1
    return acknowledged, sorted(others)


def card_notice(*, escalation_id: int, channel: str, channel_identity: str, event: str, text: str) -> CardActivity:
    """What a channel reported on an open card that changed nothing, shown on the card and audited
    (operations.lifecycle.notes.add_notice); CardNotOpen on a card no longer open. Not counted
    against anyone's DECISIONS_PER_MINUTE: no account acted, and only a signed request gets here."""
    return notes.add_notice(
        escalation_id=escalation_id,
        channel=channel,
        channel_identity=channel_identity,
        event=event,
        text=text,
        now=timezone.now(),
    )
