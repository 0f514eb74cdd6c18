"""The domain's card events, turned into policy steps (connected in escalations.apps).

Each receiver runs inside the transaction of the change it announces, under its row locks, and
only writes rows (the run, outbox rows): what it decides commits with the change or not at all,
and workers send it afterwards.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils import timezone

from escalations.oncall import outbox, runs
from operations.models import Decision, Escalation, NotificationDelivery
from operations.responders import responders

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def on_card_opened(*, escalation: Escalation, **_: object) -> None:
    runs.start(escalation=escalation, now=timezone.now())


def on_card_acknowledged(*, escalation: Escalation, user: User, previous: User | None = None, **_: object) -> None:
    """The policy stops; a take-over tells the person who held the card."""
    now = timezone.now()
    runs.acknowledge(escalation=escalation, now=now)
    if previous is not None:
        taker = user.get_username()
        runs.tell(
            escalation=escalation,
            users=[previous],
            event=NotificationDelivery.Event.TAKEN_OVER,
            note=f"{taker} took over your card\n{taker} took this card over from you and is on it; "
            "you need do nothing more.",
            now=now,
        )


def on_card_unacknowledged(*, escalation: Escalation, **_: object) -> None:
    runs.unacknowledge(escalation=escalation, now=timezone.now())


def on_card_closed(*, escalation: Escalation, **_: object) -> None:
    runs.end(escalation=escalation, now=timezone.now())


def on_card_reassigned(*, escalation: Escalation, by: User, to: User, **_: object) -> None:
    """The responder a card was handed to is told; the policy goes on until they acknowledge."""
    giver = by.get_username()
    runs.tell(
        escalation=escalation,
        users=[to],
        event=NotificationDelivery.Event.REASSIGNED,
        note=f"{giver} handed you a card\n{giver} handed you this card: it is yours now. Acknowledge it on the "
        "card so the others know you are on it (reminders go on until you do), or hand it on.",
        now=timezone.now(),
    )


def on_card_awaiting_second(*, escalation: Escalation, first: Decision, **_: object) -> None:
    """An acceptance waits for a second, different responder: the other responders (and NOTIFY_EMAILS)
    are told by email."""
    others = list(responders().exclude(pk=first.user_id))
    mine = {first.user.email.lower()} - {""}
    runs.tell(
        escalation=escalation,
        users=others,
        addresses=[a for a in settings.NOTIFY_EMAILS if a.lower() not in mine],
        event=NotificationDelivery.Event.AWAITING_SECOND,
        note=f"Second responder needed\n{first.username} accepted the output of this operation; a second, "
        "different responder must confirm it on the card (or choose another option).",
        now=timezone.now(),
    )


def on_dispatcher_pass(*, now: datetime, limit: int, **_: object) -> int:
    """operations.events.dispatcher_pass: step due policy runs, then hand due notifications to workers."""
    return runs.advance_due(now=now, limit=limit) + outbox.claim_due(now=now, limit=limit)
