"""What responders do on a card, written: each act is one Decision row, the operation and card changes it
makes, and its `human.*` audit entry, in the caller's transaction (operations.decisions checks the
act against the locked card first and calls one of these). The provider cancel of a card is in
operations.lifecycle.cancels; the Decision rows and entries in operations.lifecycle.decision_records.

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
from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.cards.card import Card
from operations.cards.options import Kind, Option
from operations.cards.signin import SignIn
from operations.lifecycle.cards import close_card, new_card_version
from operations.lifecycle.decision_records import Act, act_on, decision_entry, decision_row, printable, record
from operations.lifecycle.notes import add_note as add_note

# Ownership and notes live in their own module; they are part of what responders do on a card.
from operations.lifecycle.ownership import acknowledge as acknowledge
from operations.lifecycle.ownership import reassign as reassign
from operations.lifecycle.ownership import unacknowledge as unacknowledge
from operations.lifecycle.transitions import FINISH, RESUME
from operations.models import Authorization, Decision, Escalation, Operation
from operations.vocabulary import Channel, DelaySource, Status, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User

_AUTHORIZATION_KIND = {
    Kind.EXTEND: Authorization.Kind.EXTENSION,
    Kind.TREAT_AS_PENDING: Authorization.Kind.TREAT_AS_PENDING,
    Kind.RETRY_AFTER_ROTATION: Authorization.Kind.RETRY_AFTER_ROTATION,
    Kind.APPROVE_ONE_CHECK: Authorization.Kind.APPROVE_ONE_CHECK,
}


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


def grant(
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
    """Options that let polling continue: a new Authorization chained to the previous one.

    extend / treat_as_pending grant a window: exactly its checks from now, paced across it (the
    operation keeps the window's spacing, which takes the place of local backoff until the next
    grant); retry_after_rotation and approve_one_check grant one request. The operation goes back
    to running with its next poll due at once (or when the provider's wait ends), delay source
    manual_extension, backoff where it was (never restarted from its first step), and the fence
    moved so no older claim can write. Taken at or after the business deadline, the decision also
    lets polling continue past it (`business_deadline_waived_at`).
    """
    operation = card.operation
    assert option.new_deadline_at is not None and option.new_max_requests is not None
    act = act_on(
        card=card, user=user, sign_in=sign_in, comment=comment, channel=channel, channel_identity=channel_identity
    )
    pending, added_state = _pending_states(card=card, option=option)
    authorization = _chain_authorization(
        card=card,
        option=option,
        deadline_at=option.new_deadline_at,
        max_requests=option.new_max_requests,
        user=user,
        now=now,
        comment=comment,
        pending=pending,
    )
    bounds = _granted_bounds(option=option, authorization=authorization)
    _resume_polling(card=card, option=option, user=user, now=now, bounds=bounds, channel=act.channel)
    return record(
        act=act,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        data={
            "new_deadline": audit.iso(option.new_deadline_at),
            "new_max_requests": option.new_max_requests,
            "authorization_number": authorization.number,
            "next_poll_at": audit.iso(operation.next_poll_at),
            "pending_state": added_state,
            "check_spacing_ms": None if option.check_spacing_s is None else round(option.check_spacing_s * 1000),
        },
        new_deadline_at=option.new_deadline_at,
        new_max_status_requests=option.new_max_requests,
        authorization=authorization,
    )


def _pending_states(*, card: Card, option: Option) -> tuple[list[str], str | None]:
    """The provider states that count as pending after the grant, and the one treat_as_pending added."""
    pending = list(card.operation.extra_pending_states or [])
    added_state = None
    if option.kind is Kind.TREAT_AS_PENDING:
        added_state = card.facts.provider_state
        if added_state and added_state not in pending:
            pending.append(added_state)
    return pending, added_state


def _chain_authorization(
    *,
    card: Card,
    option: Option,
    deadline_at: datetime,
    max_requests: int,
    user: User,
    now: datetime,
    comment: str,
    pending: list[str],
) -> Authorization:
    """The grant's Authorization (the option's new bounds), chained to the operation's previous one."""
    operation = card.operation
    previous = Authorization.objects.filter(operation=operation).order_by("-number").first()
    return Authorization.objects.create(
        operation=operation,
        number=(previous.number + 1) if previous else 1,
        previous=previous,
        kind=_AUTHORIZATION_KIND[option.kind],
        granted_by=user,
        granted_by_label=f"user:{user.get_username()}",
        granted_at=now,
        escalation=card.escalation,
        deadline_at=deadline_at,
        max_status_requests=max_requests,
        max_transport_failures=option.new_max_transport_failures or operation.max_transport_failures,
        extra_pending_states=pending,
        check_spacing_s=option.check_spacing_s,
        comment=comment,
    )


def _granted_bounds(*, option: Option, authorization: Authorization) -> dict[str, object]:
    """The operation's bounds after the grant: the new authorization's."""
    return {
        "deadline_at": option.new_deadline_at,
        "max_status_requests": option.new_max_requests,
        "max_transport_failures": authorization.max_transport_failures,
        "extra_pending_states": authorization.extra_pending_states,
        "check_spacing_s": option.check_spacing_s,
        # An approval is for the check it was asked for: one left unused (the operation stopped for
        # another reason first) must not let a later extension send a request nobody approved.
        "approved_checks": 1 if option.kind is Kind.APPROVE_ONE_CHECK else 0,
    }


def keep_waiting(
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
    """business_deadline_passed: poll on until the technical deadline within the bounds already
    granted. No new Authorization (no new authority); the Decision records who chose it."""
    act = act_on(
        card=card, user=user, sign_in=sign_in, comment=comment, channel=channel, channel_identity=channel_identity
    )
    _resume_polling(card=card, option=option, user=user, now=now, bounds={}, channel=act.channel)
    return record(
        act=act,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        data={"next_poll_at": audit.iso(card.operation.next_poll_at)},
    )


def _resume_polling(
    *, card: Card, option: Option, user: User, now: datetime, bounds: dict[str, object], channel: Channel
) -> None:
    """Back to running after a decision that lets polling continue (RESUME, with a grant's new
    `bounds`): the next poll due at once (or when the provider's wait ends), delay source
    manual_extension, the claim released, the card closed."""
    operation = card.operation
    waived = _waived_business_deadline(operation=operation, now=now)
    change = RESUME.given(
        next_poll_at=option.next_poll_at or now,
        delay_source=DelaySource.MANUAL_EXTENSION,
        updated_at=now,
        also={**bounds, **({} if waived is None else {"business_deadline_waived_at": waived})},
    )
    change.apply(op=operation)
    operation.save(update_fields=change.fields)
    close_card(escalation=card.escalation, now=now, why=f"{option.label} — by {user.get_username()}", channel=channel)


def _waived_business_deadline(*, operation: Operation, now: datetime) -> datetime | None:
    """When a decision letting polling continue waives the business deadline: now, if it is taken
    at or after it and it was not waived before. A person who lets polling continue then has
    weighed it: it stops nothing any more. Before it, an extension leaves it in force (its effect
    says so)."""
    business = operation.business_deadline_at
    if business is not None and now >= business and operation.business_deadline_waived_at is None:
        return now
    return None


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
