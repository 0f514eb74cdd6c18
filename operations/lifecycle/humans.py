"""What responders do on a card, written: each act is one Decision row, the operation and card changes it
makes, and its `human.*` audit entry, in the caller's transaction (operations.decisions checks the
act against the locked card first and calls one of these).

Every function takes the card as it was shown (`Card`): the Decision keeps a snapshot of it and the
version it was decided against, taken before anything changes. Every function also takes the
decider's sign-in (`SignIn`, None when unknown): the Decision and its audit entry record how and
when the person authenticated.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from operations import events
from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.decisions.cards import Card, snapshot_sha256
from operations.decisions.options import Kind, Option
from operations.decisions.signin import SignIn
from operations.lifecycle.cards import close_card, new_card_version

# Ownership and notes live in their own module; they are part of what responders do on a card.
from operations.lifecycle.ownership import acknowledge as acknowledge
from operations.lifecycle.ownership import add_note as add_note
from operations.lifecycle.ownership import reassign as reassign
from operations.lifecycle.ownership import unacknowledge as unacknowledge
from operations.models import Authorization, Decision, Escalation, Operation
from operations.provider_cancel import CancelResult
from operations.representation import rfc3339
from operations.vocabulary import CONTROL_CHARACTERS, CancelState, DelaySource, Status

_AUTHORIZATION_KIND = {
    Kind.EXTEND: Authorization.Kind.EXTENSION,
    Kind.TREAT_AS_PENDING: Authorization.Kind.TREAT_AS_PENDING,
    Kind.RETRY_AFTER_ROTATION: Authorization.Kind.RETRY_AFTER_ROTATION,
    Kind.APPROVE_ONE_CHECK: Authorization.Kind.APPROVE_ONE_CHECK,
}


def username(user: object) -> str:
    return str(user.get_username())  # type: ignore[attr-defined]


def _printable(value: str) -> str:
    return CONTROL_CHARACTERS.sub("", value)


def _record(
    *,
    card: Card,
    user: object,
    sign_in: SignIn | None,
    option_id: str,
    outcome: str,
    comment: str,
    snapshot: dict[str, object],
    card_version: int | None,
    entry_type: str = "human.decision",
    data: dict[str, object] | None = None,
    **fields: object,
) -> Decision:
    """The Decision row and its audit entry (last in the transaction), linked to each other."""
    decision = _decision_row(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option_id,
        outcome=outcome,
        comment=comment,
        snapshot=snapshot,
        card_version=card_version,
        **fields,
    )
    _decision_entry(decision, user=user, entry_type=entry_type, data=data)
    return decision


def _decision_row(
    *,
    card: Card,
    user: object,
    sign_in: SignIn | None,
    option_id: str,
    outcome: str,
    comment: str,
    snapshot: dict[str, object],
    card_version: int | None,
    **fields: object,
) -> Decision:
    return Decision.objects.create(
        escalation=card.escalation,
        operation=card.operation,
        user=user,
        decided_at=card.facts.now,
        option=option_id,
        outcome=outcome,
        comment=comment,
        card_version=card_version,
        card_snapshot=snapshot,
        authentication=None if sign_in is None else sign_in.as_record(),
        **fields,
    )


def _decision_entry(
    decision: Decision, *, user: object, entry_type: str = "human.decision", data: dict[str, object] | None = None
) -> None:
    base: dict[str, object] = {
        "escalation_id": decision.escalation_id,
        "decision_id": decision.pk,
        "authentication": decision.authentication,
    }
    if entry_type == "human.decision":
        base |= {
            "option": decision.option,
            "outcome": decision.outcome,
            "comment": decision.comment or None,
            "card_version": decision.card_version,
            "card_sha256": snapshot_sha256(decision.card_snapshot),
            "state": str(decision.operation.status),
        }
    entry = audit.append(
        entry_type=entry_type,
        actor=audit.user_actor(user),
        operation_id=decision.operation_id,
        data={**base, **(data or {})},
        at=decision.decided_at,
    )
    # The entry's seq is known only once appended; the row update rides the same transaction.
    Decision.objects.filter(pk=decision.pk).update(audit_entry_id=entry.pk)
    decision.audit_entry_id = entry.pk


def refuse(
    *,
    card: Card,
    user: object,
    sign_in: SignIn | None,
    posted_id: str,
    posted_version: object,
    version: int | None,
    comment: str,
    why: str,
) -> Decision:
    """Record a refused attempt: who tried what against which version, and why it was refused.

    The same refusal again soon (same person, card, option, card version and reason, within
    DECISION_REPEAT_WINDOW_S of its last repeat) is counted on the first record instead: no new row,
    no new audit entry; the comment of the first attempt is the one kept.
    """
    option = _printable(posted_id)[:100]
    repeated = _same_refusal(card=card, user=user, option=option, version=version, why=why)
    if repeated is not None:
        now = card.facts.now
        Decision.objects.filter(pk=repeated.pk).update(repeat_count=F("repeat_count") + 1, last_repeated_at=now)
        repeated.repeat_count += 1
        repeated.last_repeated_at = now
        return repeated
    snapshot = card.snapshot()
    snapshot["posted"] = {"option": posted_id[:100], "card_version": str(posted_version)[:20]}
    return _record(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option,
        outcome=Decision.Outcome.REFUSED,
        comment=comment,
        snapshot=snapshot,
        card_version=version,
        entry_type="human.refused",
        data={"option": option, "card_version": version, "reason": why},
        refusal_reason=why,
    )


def _same_refusal(*, card: Card, user: object, option: str, version: int | None, why: str) -> Decision | None:
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


def record_inspect(*, card: Card, option: Option, user: object, sign_in: SignIn | None, comment: str) -> Decision:
    """Who looked and when; the card stays open and its version does not move."""
    return _record(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option.id,
        outcome=Decision.Outcome.RECORDED,
        comment=comment,
        snapshot=card.snapshot(),
        card_version=card.escalation.version,
        entry_type="human.inspect",
        data={"card_version": card.escalation.version, "console_url": card.console_url or None},
    )


def grant(*, card: Card, option: Option, user: object, sign_in: SignIn | None, comment: str, now: datetime) -> Decision:
    """Options that let polling continue: a new Authorization chained to the previous one.

    extend / treat_as_pending grant a window: exactly its checks from now, paced across it (the
    operation keeps the window's spacing, which takes the place of local backoff until the next
    grant); retry_after_rotation and approve_one_check grant one request. The operation goes back
    to running with its next poll due at once (or when the provider's wait ends), delay source
    manual_extension, backoff where it was (never restarted from its first step), and the fence
    moved so no older claim can write. Taken at or after the business deadline, the decision also
    lets polling continue past it (`business_deadline_waived_at`).
    """
    operation, escalation = card.operation, card.escalation
    assert option.new_deadline_at is not None and option.new_max_requests is not None
    snapshot, version = card.snapshot(), escalation.version
    pending = list(operation.extra_pending_states or [])
    added_state = None
    if option.kind is Kind.TREAT_AS_PENDING:
        added_state = card.facts.provider_state
        if added_state and added_state not in pending:
            pending.append(added_state)
    previous = Authorization.objects.filter(operation=operation).order_by("-number").first()
    authorization = Authorization.objects.create(
        operation=operation,
        number=(previous.number + 1) if previous else 1,
        previous=previous,
        kind=_AUTHORIZATION_KIND[option.kind],
        granted_by=user,
        granted_by_label=f"user:{username(user)}",
        granted_at=now,
        escalation=escalation,
        deadline_at=option.new_deadline_at,
        max_status_requests=option.new_max_requests,
        max_transport_failures=option.new_max_transport_failures or operation.max_transport_failures,
        extra_pending_states=pending,
        check_spacing_s=option.check_spacing_s,
        comment=comment,
    )
    operation.status = Status.RUNNING
    operation.deadline_at = option.new_deadline_at
    operation.max_status_requests = option.new_max_requests
    operation.max_transport_failures = authorization.max_transport_failures
    operation.extra_pending_states = pending
    operation.next_poll_at = option.next_poll_at or now
    operation.delay_source = DelaySource.MANUAL_EXTENSION
    operation.check_spacing_s = option.check_spacing_s
    _waive_business_deadline(operation, now=now)
    # An approval is for the check it was asked for: one left unused (the operation stopped for
    # another reason first) must not let a later extension send a request nobody approved.
    operation.approved_checks = 1 if option.kind is Kind.APPROVE_ONE_CHECK else 0
    _release_claim(operation)
    operation.sequence += 1
    operation.updated_at = now
    operation.save()
    close_card(escalation=escalation, now=now, why=f"{option.label} — by {username(user)}")
    return _record(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        comment=comment,
        snapshot=snapshot,
        card_version=version,
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


def keep_waiting(
    *, card: Card, option: Option, user: object, sign_in: SignIn | None, comment: str, now: datetime
) -> Decision:
    """business_deadline_passed: poll on until the technical deadline within the bounds already
    granted. No new Authorization (no new authority); the Decision records who chose it."""
    operation, escalation = card.operation, card.escalation
    snapshot, version = card.snapshot(), escalation.version
    operation.status = Status.RUNNING
    operation.next_poll_at = option.next_poll_at or now
    operation.delay_source = DelaySource.MANUAL_EXTENSION
    _waive_business_deadline(operation, now=now)
    _release_claim(operation)
    operation.sequence += 1
    operation.updated_at = now
    operation.save()
    close_card(escalation=escalation, now=now, why=f"{option.label} — by {username(user)}")
    return _record(
        card=card,
        user=user,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        comment=comment,
        snapshot=snapshot,
        card_version=version,
        sign_in=sign_in,
        data={"next_poll_at": audit.iso(operation.next_poll_at)},
    )


def _waive_business_deadline(operation: Operation, *, now: datetime) -> None:
    # A person who lets polling continue at or after the business deadline has weighed it: it
    # stops nothing any more. Before it, an extension leaves it in force (its effect says so).
    business = operation.business_deadline_at
    if business is not None and now >= business and operation.business_deadline_waived_at is None:
        operation.business_deadline_waived_at = now


def close(*, card: Card, option: Option, user: object, sign_in: SignIn | None, comment: str, now: datetime) -> Decision:
    """Stop watching: the operation ends closed with the responder's reason."""
    operation, escalation = card.operation, card.escalation
    snapshot, version = card.snapshot(), escalation.version
    message = f"Closed by {username(user)} after “{card.reason_label}”"
    if comment:
        message += f": {comment}"
    _finish(
        operation,
        status=Status.CLOSED,
        now=now,
        error={
            "code": "closed_by_human",
            "message": message[:1000],
            "reason": escalation.reason,
            "provider_error": None,
        },
    )
    close_card(escalation=escalation, now=now, why=f"closed by {username(user)}")
    return _record(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        comment=comment,
        snapshot=snapshot,
        card_version=version,
    )


def accept_output(
    *, card: Card, option: Option, user: object, sign_in: SignIn | None, comment: str, now: datetime
) -> Decision:
    """Four eyes: the first responder's acceptance waits; a second, different one applies it."""
    operation, escalation, first = card.operation, card.escalation, card.awaiting
    snapshot, version = card.snapshot(), escalation.version
    if first is None:
        # The card now shows who accepted and waits for a second person: a new version.
        new_card_version(escalation=escalation)
        waiting = _decision_row(
            card=card,
            user=user,
            sign_in=sign_in,
            option_id=option.id,
            outcome=Decision.Outcome.AWAITING_SECOND,
            comment=comment,
            snapshot=snapshot,
            card_version=version,
        )
        # The other responders are told (the dashboard's receiver queues it with this transaction).
        events.card_awaiting_second.send(sender=Escalation, escalation=escalation, first=waiting)
        _decision_entry(waiting, user=user)
        return waiting
    first_name = first.username
    _finish(
        operation,
        status=Status.SUCCEEDED,
        now=now,
        result={
            "values": {},
            "counts": operation.progress_counts,
            "accepted": {
                "by": [first_name, username(user)],
                "comments": [first.comment, comment],
                "why_it_stopped": escalation.detail,
                "provider_state": operation.last_provider_state or None,
            },
        },
    )
    close_card(escalation=escalation, now=now, why=f"output accepted by {first_name} and {username(user)}")
    return _record(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        comment=comment,
        snapshot=snapshot,
        card_version=version,
        data={"confirms_decision_id": first.pk},
        confirms=first,
    )


def claim_cancel(
    *, card: Card, option: Option, user: object, sign_in: SignIn | None, comment: str, now: datetime
) -> Decision:
    """The one cancel request of a card, claimed before it is sent.

    Once committed, the option is gone from the card and the version moved, so a second click (or a
    second responder) can never send the cancel again.
    """
    operation, escalation = card.operation, card.escalation
    snapshot, version = card.snapshot(), escalation.version
    decision = _decision_row(
        card=card,
        user=user,
        sign_in=sign_in,
        option_id=option.id,
        outcome=Decision.Outcome.APPLIED,
        comment=comment,
        snapshot=snapshot,
        card_version=version,
    )
    escalation.cancel_response = {
        "state": "sending",
        "decision_id": decision.pk,
        "by": username(user),
        "sent_at": rfc3339(now),
    }
    escalation.save(update_fields=["cancel_response"])
    new_card_version(escalation=escalation)
    operation.cancel_requested_at = now
    operation.cancel_reason = (comment or f"cancel_at_provider by {username(user)}")[:280]
    operation.cancel_state = CancelState.REQUESTED
    operation.save(update_fields=["cancel_requested_at", "cancel_reason", "cancel_state"])
    _decision_entry(decision, user=user)
    return decision


def record_cancel_answer(
    *, operation: Operation, escalation: Escalation, decision: Decision, user: object, result: CancelResult
) -> bool:
    """The provider's answer to the card's cancel; the operation ends cancelled only when the provider
    confirmed. Call with the operation and card locked. Returns whether it ended cancelled."""
    now = timezone.now()
    record = {**result.as_record(), "received_at": rfc3339(now)}
    Decision.objects.filter(pk=decision.pk).update(provider_response=record)
    decision.provider_response = record
    escalation.cancel_response = {**(escalation.cancel_response or {}), **record}
    escalation.save(update_fields=["cancel_response"])
    operation.cancel_state = result.state
    fields = ["cancel_state"]
    if result.provider_state and result.provider_state != operation.last_provider_state:
        # The cancel's answer is the provider's latest word on the job: "last provider state" is that
        # state now, not the one of the poll before (an agent sees it too, so the sequence moves).
        operation.last_provider_state = result.provider_state[:200]
        operation.sequence += 1
        operation.updated_at = now
        fields += ["last_provider_state", "sequence", "updated_at"]
    operation.save(update_fields=fields)
    confirmed = result.confirmed and operation.status == Status.NEEDS_ATTENTION
    if confirmed:
        _finish(
            operation,
            status=Status.CANCELLED,
            now=now,
            error={
                "code": "cancelled_at_provider",
                "message": (
                    f"Cancelled at the provider on {username(user)}'s decision; "
                    f"the provider confirmed state {result.provider_state!r}"
                ),
                "provider_error": None,
            },
        )
    if confirmed and escalation.state == Escalation.State.OPEN:
        close_card(escalation=escalation, now=now, why=f"cancelled at the provider by {username(user)}")
    else:
        new_card_version(escalation=escalation)
    audit.append(
        entry_type="provider.cancel_response",
        actor=audit.user_actor(user),
        operation_id=operation.pk,
        data={
            "escalation_id": escalation.pk,
            "decision_id": decision.pk,
            "cancel_state": result.state,
            "http_status": result.http_status,
            "provider_state": result.provider_state,
            "provider_request_id": result.provider_request_id or None,
            "state": str(operation.status),
        },
        at=now,
    )
    return confirmed


def _release_claim(operation: Operation) -> None:
    # A new fence: any claim or in-flight poll from before the decision can no longer write.
    operation.fence += 1
    operation.lease_owner, operation.lease_expires_at, operation.claimed_at = "", None, None
    operation.claim_due_at = None


def _finish(
    operation: Operation, *, status: Status, now: datetime, result: dict | None = None, error: dict | None = None
) -> None:
    """End the operation on a human decision; the completion event rides the same transaction."""
    operation.status = status
    operation.result = result
    operation.error = error
    operation.completed_at = now
    operation.next_poll_at = None
    _release_claim(operation)
    operation.sequence += 1
    operation.updated_at = now
    operation.save()
    record_event(operation=operation, event_type=EVENT_COMPLETED)
