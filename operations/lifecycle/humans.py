"""What responders do on a card, written: each act is one Decision row, the operation and card changes it
makes, and its `human.*` audit entry, in the caller's transaction (operations.decisions checks the
act against the locked card first and calls one of these). The provider cancel of a card is in
operations.lifecycle.cancels, the decisions that let polling continue in operations.lifecycle.grants;
the Decision rows and entries in operations.lifecycle.decision_records.

Every function takes the card as it was shown (`Card`): the Decision keeps a snapshot of it and the
version it was decided against, taken before anything changes. Every function also takes the
decider's sign-in (`SignIn`, None when unknown): the Decision and its audit entry record how and
when the person authenticated.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import F

from operations import events
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.cards.card import Card
from operations.cards.options import Option
from operations.cards.signin import SignIn
from operations.lifecycle.cards import close_card, new_card_version
from operations.lifecycle.decision_records import Act, act_on, decision_entry, decision_row, printable, record
from operations.lifecycle.notes import add_note as add_note

# Ownership and notes live in their own module; they are part of what responders do on a card.
from operations.lifecycle.ownership import acknowledge as acknowledge
from operations.lifecycle.ownership import reassign as reassign
from operations.lifecycle.ownership import unacknowledge as unacknowledge
from operations.lifecycle.transitions import FINISH
from operations.models import Decision, Escalation, Operation
from operations.vocabulary import Channel, Status, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def refuse(
    *,
    card: Card,
    user: User,
    sign_in: SignIn | None,
    posted_id: str,
    posted_version: object,
    version: int | None,
    comment: str,
    why: str,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Decision:
    """Record a refused attempt: who tried what against which version, and why it was refused.

    The same refusal again soon (same person, card, option, card version and reason, within
    DECISION_REPEAT_WINDOW_S of its last repeat) is counted on the first record instead: no new row,
    no new audit entry; the comment of the first attempt is the one kept.
    """
    option = printable(value=posted_id)[:100]
    repeated = _same_refusal(card=card, user=user, option=option, version=version, why=why)
    if repeated is not None:
        now = card.facts.now
        Decision.objects.filter(pk=repeated.pk).update(repeat_count=F("repeat_count") + 1, last_repeated_at=now)
        repeated.repeat_count += 1
        repeated.last_repeated_at = now
        return repeated
    snapshot = card.snapshot()
    snapshot["posted"] = {"option": posted_id[:100], "card_version": str(posted_version)[:20]}
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    return record(
        act=Act(
            card=card,
            user=user,
            sign_in=sign_in,
            comment=comment,
            snapshot=snapshot,
            card_version=version,
            channel=known,
            channel_identity=identity,
        ),
        option_id=option,
        outcome=Decision.Outcome.REFUSED,
        entry_type="human.refused",
        data={"option": option, "card_version": version, "reason": why},
        refusal_reason=why,
    )


def _same_refusal(*, card: Card, user: User, option: str, version: int | None, why: str) -> Decision | None:
    """The latest identical refusal on this card by this person, if it was tried within the window."""
    latest = (
        Decision.objects.filter(
            escalation=card.escalation,
            user=user,
            outcome=Decision.Outcome.REFUSED,
            option=option,
            card_version=version,
            refusal_reason=why,
        )
        .order_by("-decided_at", "-pk")
        .first()
    )
    if latest is None:
        return None
    last_seen = latest.last_repeated_at or latest.decided_at
    return latest if card.facts.now - last_seen <= timedelta(seconds=settings.DECISION_REPEAT_WINDOW_S) else None


def record_inspect(
    *,
    card: Card,
    option: Option,
    user: User,
    sign_in: SignIn | None,
    comment: str,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Decision:
    """Who looked and when; the card stays open and its version does not move."""
    return record(
        act=act_on(
            card=card, user=user, sign_in=sign_in, comment=comment, channel=channel, channel_identity=channel_identity
        ),
        option_id=option.id,
        outcome=Decision.Outcome.RECORDED,
        entry_type="human.inspect",
        data={"card_version": card.escalation.version, "console_url": card.console_url or None},
    )


def close(
    *,
    card: Card,
    option: Option,
    user: User,
    sign_in: SignIn | None,
    comment: str,
    now: datetime,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Decision:
    """Stop watching: the operation ends closed with the responder's reason."""
    operation, escalation = card.operation, card.escalation
    act = act_on(
        card=card, user=user, sign_in=sign_in, comment=comment, channel=channel, channel_identity=channel_identity
    )
    message = f"Closed by {user.get_username()} after “{card.reason_label}”"
    if comment:
        message += f": {comment}"
    finish(
        operation=operation,
        status=Status.CLOSED,
        now=now,
        error={
            "code": "closed_by_human",
            "message": message[:1000],
            "reason": escalation.reason,
            "provider_error": None,
        },
    )
    close_card(escalation=escalation, now=now, why=f"closed by {user.get_username()}", channel=act.channel)
    return record(act=act, option_id=option.id, outcome=Decision.Outcome.APPLIED)


def accept_output(
    *,
    card: Card,
    option: Option,
    user: User,
    sign_in: SignIn | None,
    comment: str,
    now: datetime,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Decision:
    """Four eyes: the first responder's acceptance waits; a second, different one applies it."""
    operation, escalation, first = card.operation, card.escalation, card.awaiting
    act = act_on(
        card=card, user=user, sign_in=sign_in, comment=comment, channel=channel, channel_identity=channel_identity
    )
    if first is None:
        # The card now shows who accepted and waits for a second person: a new version.
        new_card_version(escalation=escalation)
        waiting = decision_row(act=act, option_id=option.id, outcome=Decision.Outcome.AWAITING_SECOND)
        # The other responders are told (the dashboard's receiver queues it with this transaction).
        events.card_awaiting_second.send(sender=Escalation, escalation=escalation, first=waiting)
        decision_entry(decision=waiting, user=user)
        return waiting
    first_name = first.username
    finish(
        operation=operation,
        status=Status.SUCCEEDED,
        now=now,
        result={
            "values": {},
            "counts": operation.progress_counts,
            "accepted": {
                "by": [first_name, user.get_username()],
                "comments": [first.comment, comment],
                "why_it_stopped": escalation.detail,
                "provider_state": operation.last_provider_state or None,
            },
        },
    )
    close_card(
        escalation=escalation,
        now=now,
        why=f"output accepted by {first_name} and {user.get_username()}",
        channel=act.channel,
    )
    return record(
        act=act,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        data={"confirms_decision_id": first.pk},
        confirms=first,
    )


def finish(
    *,
    operation: Operation,
    status: Status,
    now: datetime,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    """End the operation on a person's decision (FINISH, as a poll's final answer does); the
    completion event rides the same transaction."""
    change = FINISH.given(status=status, result=result, error=error, completed_at=now, updated_at=now)
    change.apply(op=operation)
    operation.save(update_fields=change.fields)
    record_event(operation=operation, event_type=EVENT_COMPLETED)
