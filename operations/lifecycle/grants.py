"""Decisions that let polling continue, written: a grant (extend, treat_as_pending,
retry_after_rotation, approve_one_check: a new Authorization chained to the previous one) or
keep_waiting (no new authority), then the operation back to running and the card closed. Like every
act of operations.lifecycle.humans: one Decision row, the changes it makes, its `human.*` audit
entry, in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from operations.audit import entries as audit
from operations.cards.card import Card
from operations.cards.options import Kind, Option
from operations.cards.signin import SignIn
from operations.lifecycle.cards import close_card
from operations.lifecycle.decision_records import act_on, record
from operations.lifecycle.transitions import RESUME
from operations.models import Authorization, Decision, Operation
from operations.vocabulary import Channel, DelaySource

if TYPE_CHECKING:
    from django.contrib.auth.models import User

_AUTHORIZATION_KIND = {
    Kind.EXTEND: Authorization.Kind.EXTENSION,
    Kind.TREAT_AS_PENDING: Authorization.Kind.TREAT_AS_PENDING,
    Kind.RETRY_AFTER_ROTATION: Authorization.Kind.RETRY_AFTER_ROTATION,
    Kind.APPROVE_ONE_CHECK: Authorization.Kind.APPROVE_ONE_CHECK,
}


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
