"""Who holds a card, and the notes written on it: acts that decide nothing (docs/DESIGN.md section 7).

Each act locks the card row, writes its fields and one CardActivity row, appends its `human.*` audit
entry last, and sends its signal from operations.events inside the transaction (the dashboard's
receivers queue notifications that commit with the act or not at all). None of them moves the
card's version: a decision posted against the card stays valid whoever holds it.

- acknowledge: "I'm on it". The card shows who and since when; reminders stop for it. Taking over a
  card someone else holds is this same act (the caller asks the person to confirm first, naming
  the holder, who is told).
- unacknowledge: the holder gives the card back; reminders resume.
- reassign: hand the card to a named responder, who is told; until they acknowledge it themselves
  the card is theirs but not acknowledged, so reminders go on. Handing on a card someone else
  holds is a take-over (`takeover`, confirmed by the caller): recorded as one, and the holder is
  told as a take-over tells them.
- add_note, add_notice: a note or a channel's notice on the card (operations/lifecycle/notes.py).
- snooze: silence the card's reminders until a time (the caller checks the bounds); shown on the card.
- expire_acknowledgement: pollerdash's own act when a policy's ack_timeout_s ran out with the card
  undecided: the acknowledgement is withdrawn (the holder stays) so the policy pages again and
  acknowledging anew stops it again; audited as the system, shown in the card's activity.

On a card that is no longer open each act raises CardNotOpen and writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction

from operations import events
from operations.audit import entries as audit
from operations.models import CardActivity, Escalation
from operations.responders import is_responder
from operations.vocabulary import Channel, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class OwnershipRefused(Exception):
    """The act was refused and nothing was written; `message` says why in words for the person."""

    status = 422

    def __init__(self, message: str, *, escalation: Escalation | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.escalation = escalation


class CardNotOpen(OwnershipRefused):
    """The card was decided or superseded: there is nothing to hold or note any more."""

    status = 409

    def __init__(self, escalation: Escalation) -> None:
        how = escalation.closed_reason or escalation.state
        super().__init__(f"This card is no longer open ({escalation.state}: {how}); nothing was changed.")
        self.escalation = escalation


class NotAResponder(OwnershipRefused):
    """A card can be handed only to an active account with the responder role."""


class NotHolder(OwnershipRefused):
    """Only the person who holds a card gives it back."""


class InvalidNote(OwnershipRefused):
    """The note is empty, too long, or holds control characters."""


def lock_open_card(*, escalation_id: int) -> Escalation:
    escalation = Escalation.objects.select_for_update(of=("self",)).select_related("assignee").get(pk=escalation_id)
    if escalation.state != Escalation.State.OPEN:
        raise CardNotOpen(escalation)
    return escalation


def record_activity(
    *,
    escalation: Escalation,
    kind: str,
    user: User,
    now: datetime,
    entry_type: str,
    data: dict[str, object],
    channel: str,
    channel_identity: str,
    actor: dict[str, str] | None = None,
    **fields: object,
) -> CardActivity:
    """The activity row and its audit entry, the last write of the act (`actor`: the person unless
    pollerdash itself acted)."""
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    activity = CardActivity.objects.create(
        escalation=escalation,
        operation_id=escalation.operation_id,
        kind=kind,
        user=user,
        username=user.get_username(),
        at=now,
        channel=known,
        channel_identity=identity,
        **fields,
    )
    entry = audit.append(
        entry_type=entry_type,
        actor=actor or audit.user_actor(user),
        operation_id=escalation.operation_id,
        data={
            "escalation_id": escalation.pk,
            "activity_id": activity.pk,
            "card_version": escalation.version,
            "channel": str(known),
            "channel_identity": identity or None,
            **data,
        },
        at=now,
    )
    CardActivity.objects.filter(pk=activity.pk).update(audit_entry_id=entry.pk)
    activity.audit_entry_id = entry.pk
    return activity


def acknowledge(
    *, escalation_id: int, user: User, now: datetime, channel: str = Channel.WEB, channel_identity: str = ""
) -> Escalation:
    """The person is on it: they hold the card (taking it over from whoever held it) and reminders stop.

    Acknowledging a card one already acknowledged changes nothing and records nothing.
    """
    with transaction.atomic():
        escalation = lock_open_card(escalation_id=escalation_id)
        user_id = getattr(user, "pk", None)
        if escalation.acknowledged_by_id == user_id and escalation.assignee_id == user_id:
            return escalation
        previous = escalation.assignee if escalation.assignee_id not in (None, user_id) else None
        if escalation.assignee_id != user_id:
            escalation.assignee = user
            escalation.assigned_by = None
            escalation.assigned_at = now
        escalation.acknowledged_by = user
        escalation.acknowledged_at = now
        escalation.save(update_fields=["assignee", "assigned_by", "assigned_at", "acknowledged_by", "acknowledged_at"])
        previous_name = previous.get_username() if previous is not None else ""
        events.card_acknowledged.send(
            sender=Escalation, escalation=escalation, user=user, previous=previous, channel=channel
        )
        record_activity(
            escalation=escalation,
            kind=CardActivity.Kind.ACKNOWLEDGED,
            user=user,
            now=now,
            channel=channel,
            channel_identity=channel_identity,
            entry_type="human.acknowledged",
            data={"previous_holder": previous_name or None},
            previous_username=previous_name,
        )
    return escalation


def unacknowledge(
    *, escalation_id: int, user: User, now: datetime, channel: str = Channel.WEB, channel_identity: str = ""
) -> Escalation:
    """The holder gives the card back: nobody holds it, reminders resume.

    Raises NotHolder for anyone but the person who holds it (taking it over is `acknowledge`).
    """
    with transaction.atomic():
        escalation = lock_open_card(escalation_id=escalation_id)
        user_id = getattr(user, "pk", None)
        if user_id is None or user_id not in (escalation.assignee_id, escalation.acknowledged_by_id):
            holder = escalation.assignee
            raise NotHolder(
                f"Only the person who holds this card gives it back; {holder.get_username()} holds it."
                if holder is not None
                else "Nobody holds this card; there is nothing to give back.",
                escalation=escalation,
            )
        escalation.assignee = None
        escalation.assigned_by = None
        escalation.assigned_at = None
        escalation.acknowledged_by = None
        escalation.acknowledged_at = None
        escalation.save(update_fields=["assignee", "assigned_by", "assigned_at", "acknowledged_by", "acknowledged_at"])
        events.card_unacknowledged.send(sender=Escalation, escalation=escalation, user=user)
        record_activity(
            escalation=escalation,
            kind=CardActivity.Kind.UNACKNOWLEDGED,
            user=user,
            now=now,
            channel=channel,
            channel_identity=channel_identity,
            entry_type="human.unacknowledged",
            data={},
        )
    return escalation


def reassign(
    *,
    escalation_id: int,
    by: User,
    to: User,
    now: datetime,
    channel: str = Channel.WEB,
    channel_identity: str = "",
    takeover: bool = False,
) -> Escalation:
    """Hand the card to `to`, a responder, who is told. It is theirs but not acknowledged until they
    say so, so reminders go on meanwhile. With `takeover`, `by` takes the card over from the person
    who held it (the entry says so, and they are told).

    Raises NotAResponder when `to` is not an active responder. Handing a card to the person who
    already holds it changes nothing and records nothing.
    """
    with transaction.atomic():
        escalation = lock_open_card(escalation_id=escalation_id)
        if not is_responder(to):
            raise NotAResponder(
                f"{to.get_username()} cannot be handed a card: they do not have the responder role.",
                escalation=escalation,
            )
        to_id = getattr(to, "pk", None)
        if escalation.assignee_id == to_id:
            return escalation
        previous = escalation.assignee
        previous_name = previous.get_username() if previous is not None else ""
        escalation.assignee = to
        escalation.assigned_by = by if getattr(by, "pk", None) != to_id else None
        escalation.assigned_at = now
        escalation.acknowledged_by = None
        escalation.acknowledged_at = None
        escalation.save(update_fields=["assignee", "assigned_by", "assigned_at", "acknowledged_by", "acknowledged_at"])
        taken_from = previous if takeover and previous is not None and previous.pk != getattr(by, "pk", None) else None
        events.card_reassigned.send(sender=Escalation, escalation=escalation, by=by, to=to, taken_from=taken_from)
        record_activity(
            escalation=escalation,
            kind=CardActivity.Kind.REASSIGNED,
            user=by,
            now=now,
            channel=channel,
            channel_identity=channel_identity,
            entry_type="human.reassigned",
            data={
                "to": to.get_username(),
                "previous_holder": previous_name or None,
                **({"takeover": True} if taken_from is not None else {}),
            },
            to_user=to,
            to_username=to.get_username(),
            previous_username=previous_name,
        )
    return escalation


def snooze(
    *,
    escalation_id: int,
    user: User,
    until: datetime,
    minutes: int,
    now: datetime,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Escalation:
    """Silence the card's reminders until `until` (a later snooze replaces an earlier one). The
    caller checked the bounds (operations.decisions.ownership.card_snooze)."""
    with transaction.atomic():
        escalation = lock_open_card(escalation_id=escalation_id)
        escalation.snoozed_by = user
        escalation.snoozed_until = until
        escalation.save(update_fields=["snoozed_by", "snoozed_until"])
        events.card_snoozed.send(sender=Escalation, escalation=escalation, user=user, until=until)
        record_activity(
            escalation=escalation,
            kind=CardActivity.Kind.SNOOZED,
            user=user,
            now=now,
            entry_type="human.snoozed",
            data={"until": audit.iso(until), "minutes": minutes},
            channel=channel,
            channel_identity=channel_identity,
            until=until,
        )
    return escalation


ACK_TIMEOUT_ACTOR = {"kind": "system", "id": "ack_timeout"}


def expire_acknowledgement(*, escalation_id: int, timeout_s: int, now: datetime) -> str | None:
    """The policy's acknowledgement timeout ran out on an undecided card: the acknowledgement is
    withdrawn (the card stays with its holder, who acknowledges again to stop the reminders). The
    username whose acknowledgement ran out, or None when the card is closed or nobody acknowledges it
    any more (nothing written). Call inside the transaction that restarts the policy."""
    escalation = (
        Escalation.objects.select_for_update(of=("self",)).select_related("acknowledged_by").get(pk=escalation_id)
    )
    holder, since = escalation.acknowledged_by, escalation.acknowledged_at
    if escalation.state != Escalation.State.OPEN or holder is None or since is None:
        return None
    escalation.acknowledged_by = None
    escalation.acknowledged_at = None
    escalation.save(update_fields=["acknowledged_by", "acknowledged_at"])
    record_activity(
        escalation=escalation,
        kind=CardActivity.Kind.ACK_EXPIRED,
        user=holder,
        now=now,
        entry_type="escalation.ack_expired",
        data={
            "acknowledged_by": holder.get_username(),
            "acknowledged_at": audit.iso(since),
            "ack_timeout_s": timeout_s,
        },
        actor=ACK_TIMEOUT_ACTOR,
        # pollerdash's own act: no channel brought it; recorded as the dashboard's, with no identity.
        channel=Channel.WEB,
        channel_identity="",
        until=since,
    )
    return holder.get_username()
