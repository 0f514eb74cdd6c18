"""The domain's events, turned into policy steps and queued messages (connected in escalations.apps).

Each receiver runs inside the transaction of the change it announces, under its row locks, and
only writes rows (the run, outbox rows): what it decides commits with the change or not at all, and
workers send it afterwards (the dispatcher hands them due rows).

Every process imports this module at start-up (escalations.apps), so it imports no sending code
(the channels and the HTTP client), and the policy code (runs, outbox_rows and outbox, with the policy rules,
the stored policies and the roles) and the messages about no card (notices) only when an event
first comes in: a command that handles none, such as `manage.py audit_export`, starts without them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils import timezone

from operations.models import CallbackDelivery, Decision, Escalation, NotificationDelivery, Operation
from operations.responders import responders

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def on_card_opened(*, escalation: Escalation, **_: object) -> None:
    from escalations.oncall import runs

    runs.start(escalation=escalation, now=timezone.now())


def on_card_acknowledged(*, escalation: Escalation, user: User, previous: User | None = None, **_: object) -> None:
    """The policy stops; a take-over tells the person who held the card."""
    from escalations.oncall import outbox_rows, runs

    now = timezone.now()
    runs.acknowledge(escalation=escalation, now=now)
    if previous is not None:
        taker = user.get_username()
        outbox_rows.tell(
            escalation=escalation,
            users=[previous],
            event=NotificationDelivery.Event.TAKEN_OVER,
            note=f"{taker} took over your card\n{taker} took this card over from you and is on it; "
            "you need do nothing more.",
            now=now,
            by=user,
        )


def on_card_unacknowledged(*, escalation: Escalation, user: User | None = None, **_: object) -> None:
    from escalations.oncall import runs

    runs.unacknowledge(escalation=escalation, now=timezone.now(), by=user)


def on_card_snoozed(*, escalation: Escalation, until: datetime, **_: object) -> None:
    """No level or reminder goes out for the card before `until`."""
    from escalations.oncall import runs

    runs.snooze(escalation=escalation, until=until, now=timezone.now())


def on_card_closed(*, escalation: Escalation, **_: object) -> None:
    from escalations.oncall import runs

    runs.end(escalation=escalation, now=timezone.now())


def on_card_reassigned(
    *, escalation: Escalation, by: User, to: User, taken_from: User | None = None, **_: object
) -> None:
    """The responder a card was handed to is told; the policy goes on until they acknowledge. Nobody
    is told of a card they took themselves (one someone else held is taken over, which tells them).
    A card handed on by someone who took it over from its holder tells that holder, as a take-over."""
    from escalations.oncall import outbox_rows, updates

    giver = by.get_username()
    now = timezone.now()
    updates.update_in_place(escalation_id=escalation.pk, now=now)
    if taken_from is not None:
        outbox_rows.tell(
            escalation=escalation,
            users=[taken_from],
            event=NotificationDelivery.Event.TAKEN_OVER,
            note=f"{giver} took over your card\n{giver} took this card over from you and handed it to "
            f"{to.get_username()}; you need do nothing more.",
            now=now,
            by=by,
        )
    if by.pk == to.pk:
        return
    outbox_rows.tell(
        escalation=escalation,
        users=[to],
        event=NotificationDelivery.Event.REASSIGNED,
        note=f"{giver} handed you a card\n{giver} handed you this card: it is yours now. Acknowledge it on the "
        "card so the others know you are on it (reminders go on until you do), or hand it on.",
        now=now,
        by=by,
    )


def on_card_awaiting_second(*, escalation: Escalation, first: Decision, **_: object) -> None:
    """An acceptance waits for a second, different responder: the other responders (and NOTIFY_EMAILS)
    are told by email."""
    from escalations.oncall import outbox_rows

    others = list(responders().exclude(pk=first.user_id))
    mine = {first.user.email.lower()} - {""}
    outbox_rows.tell(
        escalation=escalation,
        users=others,
        addresses=[a for a in settings.NOTIFY_EMAILS if a.lower() not in mine],
        event=NotificationDelivery.Event.AWAITING_SECOND,
        note=f"Second responder needed\n{first.username} accepted the output of this operation; a second, "
        "different responder must confirm it on the card (or choose another option).",
        now=timezone.now(),
        by=first.user,
    )


def on_dispatcher_pass(*, now: datetime, limit: int, **_: object) -> int:
    """operations.events.dispatcher_pass: restart the policies whose acknowledgement timed out, step due
    policy runs, then hand due notifications to workers."""
    from escalations.oncall import outbox, runs

    return (
        runs.expire_acknowledgements(now=now, limit=limit)
        + runs.advance_due(now=now, limit=limit)
        + outbox.claim_due(now=now, limit=limit)
    )


def on_callback_undeliverable(*, delivery: CallbackDelivery, reason: str, **_: object) -> None:
    """operations.events.callback_undeliverable: on-call's messages written with the transaction
    (escalations.oncall.notices; workers send them like every other message)."""
    from escalations.oncall import notices

    notices.queue_callback_failed(
        operation_id=delivery.operation_id,
        callback_id=delivery.pk,
        event_type=delivery.event_type,
        reason=reason,
        now=timezone.now(),
    )


def on_business_deadline_near(*, operation: Operation, **_: object) -> None:
    """operations.events.business_deadline_near: the early warning written with the transaction that
    recorded it (once per operation: the lifecycle claims `business_deadline_warned_at` first)."""
    from escalations.oncall import notices

    notices.queue_business_deadline(operation_id=operation.pk, now=timezone.now())


def adopt_open_cards(**kwargs: object) -> int:
    """post_migrate: open cards without a run start the policy they follow (runs.adopt_open_cards)."""
    from escalations.oncall import runs

    return runs.adopt_open_cards(**kwargs)
