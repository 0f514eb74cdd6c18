"""Notes on a card: a person's comment, or what a channel reported, written in the card's thread;
they decide nothing and hold nothing (docs/DESIGN.md section 7).

Each locks the open card row (operations.lifecycle.ownership), writes one CardActivity row and its
audit entry last; on a card that is no longer open it raises CardNotOpen and writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction

from operations.audit import entries as audit
from operations.lifecycle.ownership import InvalidNote, lock_open_card, record_activity
from operations.models import CardActivity
from operations.vocabulary import CONTROL_CHARACTERS, Channel, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

NOTE_MAX = 2000


def clean_note(*, text: object) -> str:
    """The note as stored: plain text up to NOTE_MAX characters, line breaks allowed; anything else
    (control or hidden characters, nothing to say, too long) raises InvalidNote naming the field."""
    if not isinstance(text, str):
        raise InvalidNote("note: write some text")
    normalised = text.replace("\r\n", "\n").strip()
    if not normalised:
        raise InvalidNote("note: write some text")
    if len(normalised) > NOTE_MAX:
        raise InvalidNote(f"note: at most {NOTE_MAX} characters ({len(normalised)} given)")
    if CONTROL_CHARACTERS.search(normalised) or "\r" in normalised:
        raise InvalidNote("note: control or hidden characters are not allowed (plain text and line breaks only)")
    return normalised


def add_note(
    *, escalation_id: int, user: User, text: str, now: datetime, channel: str = Channel.WEB, channel_identity: str = ""
) -> CardActivity:
    """A note in the card's thread; decides nothing. Raises InvalidNote for text `clean_note` refuses."""
    note = clean_note(text=text)
    with transaction.atomic():
        escalation = lock_open_card(escalation_id=escalation_id)
        return record_activity(
            escalation=escalation,
            kind=CardActivity.Kind.NOTE,
            user=user,
            now=now,
            channel=channel,
            channel_identity=channel_identity,
            entry_type="human.note",
            data={"text": note},
            text=note,
        )


def add_notice(
    *, escalation_id: int, channel: str, channel_identity: str, event: str, text: str, now: datetime
) -> CardActivity:
    """What a channel reported on an open card that changed nothing ("resolved in PagerDuty by X; this
    card still needs a decision", "no pollerdash account uses this PagerDuty user's email"): a
    CardActivity of no account and its `oncall.notice` entry, with the identity the channel verified.
    CardNotOpen on a card that is no longer open (nothing is written)."""
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    line = CONTROL_CHARACTERS.sub("", text)[:NOTE_MAX]
    with transaction.atomic():
        escalation = lock_open_card(escalation_id=escalation_id)
        activity = CardActivity.objects.create(
            escalation=escalation,
            operation_id=escalation.operation_id,
            kind=CardActivity.Kind.NOTICE,
            user=None,
            username="",
            at=now,
            text=line,
            channel=known,
            channel_identity=identity,
        )
        entry = audit.append(
            entry_type="oncall.notice",
            # "pagerduty:PABC123" as actors read: the channel, and who it verified.
            actor={"kind": str(known), "id": identity.removeprefix(f"{known}:") or str(known)},
            operation_id=escalation.operation_id,
            data={
                "escalation_id": escalation.pk,
                "activity_id": activity.pk,
                "card_version": escalation.version,
                "channel": str(known),
                "channel_identity": identity or None,
                "event": event[:100],
                "text": line,
            },
            at=now,
        )
        CardActivity.objects.filter(pk=activity.pk).update(audit_entry_id=entry.pk)
        activity.audit_entry_id = entry.pk
    return activity
