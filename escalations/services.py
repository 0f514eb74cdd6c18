"""Escalation writes: opening a card, the decisions humans take on it, superseding it.

Every decision runs in one transaction that locks the operation row, then the escalation row
(the lock order of the controller: account, operation, then the audit head last), re-reads the
card, and compares the version the responder saw with the current one. So of two responders
clicking at once exactly one decision applies; the other is refused with "state changed —
review again" and that refusal is recorded too (a Decision row with outcome `refused` and a
`human.refused` audit entry). Options and durations are checked against the options the server
computes from the locked rows, never against what the browser posted. Nothing here runs on a
timer: no decision is ever taken by timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from escalations import notifications
from escalations.cards import Card, load_card, snapshot_sha256
from escalations.models import Decision, Escalation
from escalations.options import Kind, Option, parse_option_id
from operations import audit, quotas, ratelimit
from operations.callbacks import EVENT_NEEDS_ATTENTION, record_event
from operations.credentials import credential_publish
from operations.models import Authorization, Operation
from operations.provider_cancel import CancelResult, send_provider_cancel
from operations.representation import rfc3339
from operations.vocabulary import CONTROL_CHARACTERS, DelaySource, Reason, Status

STALE = "state changed — review again"
NOT_OFFERED = "option not offered on this card"
COMMENT_REQUIRED = "a comment is required for this option"
SAME_RESPONDER = "a second, different responder must confirm; you already accepted this output"
COMMENT_MAX = 2000


@dataclass
class TooManyDecisions(Exception):
    """The person passed DECISIONS_PER_MINUTE: the decision was not considered and nothing was written."""

    retry_after_s: int

    @property
    def message(self) -> str:
        return (
            f"Too many decisions: at most {settings.DECISIONS_PER_MINUTE} per minute per person. Nothing was "
            f"recorded; try again in {self.retry_after_s} s"
        )


@dataclass(frozen=True)
class DecideResult:
    decision: Decision
    message: str
    # inspect: where the responder goes next (the provider console), if anywhere.
    redirect_url: str = ""

    @property
    def outcome(self) -> str:
        return self.decision.outcome

    @property
    def refused(self) -> bool:
        return self.decision.outcome == Decision.Outcome.REFUSED

    @property
    def stale(self) -> bool:
        return self.refused and self.decision.refusal_reason == STALE


# --- opening, superseding, assigning --------------------------------------------------------------------


def escalation_open(*, operation: Operation, reason: Reason, detail: str, context: dict) -> Escalation:
    """Open the decision card for an operation that just entered needs_attention.

    Runs inside the transaction that changed the operation's status, after its controller entry.
    The notification task is enqueued in the same transaction (django-q2's ORM broker), so it is
    sent only if the card really opened, and the mail and webhook go out from a worker, never
    from inside this transaction.
    """
    now = timezone.now()
    fingerprint = ""
    if reason is Reason.AUTHORIZATION_DENIED:
        # Recorded (and published) by the worker that was refused: the credential it sent.
        fingerprint = credential_publish(credential_env=operation.provider.credential_env)
    escalation = Escalation.objects.create(
        operation=operation,
        reason=reason,
        detail=detail,
        opened_at=now,
        credential_fingerprint=fingerprint,
        context={key: value for key, value in context.items() if value is not None},
    )
    record_event(operation=operation, event_type=EVENT_NEEDS_ATTENTION)
    if operation.agent_id is not None:
        quotas.count_card(agent_id=operation.agent_id, now=now)
    notifications.enqueue(escalation_id=escalation.pk, kind=notifications.OPENED)
    audit.append(
        entry_type="escalation.opened",
        actor=audit.SYSTEM_CONTROLLER,
        operation_id=operation.pk,
        data={
            "escalation_id": escalation.pk,
            "reason": str(reason),
            "detail": detail,
            "request_count": operation.status_requests_used,
            "max_requests": operation.max_status_requests,
            "deadline": audit.iso(operation.deadline_at),
        },
        at=now,
    )
    return escalation


def escalation_supersede(*, operation: Operation, reason: str) -> Escalation | None:
    """The operation ended another way (e.g. the agent cancelled it): its open card is superseded.

    Call inside the transaction that ends the operation, with the operation row locked, before
    that transaction's own audit entry (which records how the operation ended). Its buttons stop
    working at once: the version moves, so any decision posted from the old card is refused.
    """
    escalation = Escalation.objects.select_for_update().filter(operation=operation, state=Escalation.State.OPEN).first()
    if escalation is None:
        return None
    escalation.state = Escalation.State.SUPERSEDED
    escalation.closed_at = timezone.now()
    escalation.closed_reason = reason[:300]
    escalation.version += 1
    escalation.save(update_fields=["state", "closed_at", "closed_reason", "version"])
    return escalation


def escalation_assign(*, escalation_id: int, user: object, take: bool) -> Escalation:
    """Take a card ("mine") or give it back. Not a decision: it changes no bounds or version."""
    with transaction.atomic():
        escalation = Escalation.objects.select_for_update().get(pk=escalation_id)
        if escalation.state == Escalation.State.OPEN:
            if take:
                escalation.assignee = user  # type: ignore[assignment]
            elif escalation.assignee_id == getattr(user, "pk", None):
                escalation.assignee = None
            escalation.save(update_fields=["assignee"])
    return escalation


# --- deciding ---------------------------------------------------------------------------------------


def escalation_decide(
    *, escalation_id: int, user: object, option_id: object, card_version: object, comment: object = ""
) -> DecideResult:
    """Apply one option of a card for `user`, or refuse it and record the refusal.

    Raises TooManyDecisions beyond DECISIONS_PER_MINUTE for this person (counted before anything
    else, in the database so it holds across web processes) and Escalation.DoesNotExist for an
    unknown card. Everything else (stale version, an option or duration the card does not offer, a
    missing comment, the same person confirming their own acceptance) is a recorded refusal,
    returned as a DecideResult.
    """
    if settings.DECISIONS_PER_MINUTE > 0:
        wait_s = ratelimit.take(
            key=f"decisions:user:{user.pk}",  # type: ignore[attr-defined]
            limit=settings.DECISIONS_PER_MINUTE,
            window_s=60,
            now=timezone.now(),
        )
        if wait_s is not None:
            raise TooManyDecisions(retry_after_s=wait_s)
    operation_id = Escalation.objects.values_list("operation_id", flat=True).get(pk=escalation_id)
    posted_id = option_id if isinstance(option_id, str) else ""
    text = _clean_comment(comment)
    parsed = parse_option_id(posted_id)
    if parsed is not None and parsed.kind is Kind.CANCEL_AT_PROVIDER:
        return _cancel_at_provider(
            operation_id=operation_id, escalation_id=escalation_id, user=user, card_version=card_version, comment=text
        )
    with transaction.atomic():
        offered = _offered(
            operation_id=operation_id,
            escalation_id=escalation_id,
            user=user,
            posted_id=posted_id,
            card_version=card_version,
            comment=text,
        )
        if isinstance(offered, DecideResult):
            return offered
        card, option, now = offered.card, offered.option, offered.now
        apply = {
            Kind.EXTEND: _apply_extension,
            Kind.TREAT_AS_PENDING: _apply_extension,
            Kind.RETRY_AFTER_ROTATION: _apply_extension,
            Kind.APPROVE_ONE_CHECK: _apply_extension,
            Kind.INSPECT: _apply_inspect,
            Kind.CLOSE: _apply_close,
            Kind.ACCEPT_OUTPUT: _apply_accept_output,
        }[option.kind]
        return apply(card=card, option=option, user=user, comment=text, now=now)


def _lock(*, operation_id: str, escalation_id: int) -> tuple[Operation, Escalation]:
    # Lock the operation row only ("of self"): the provider profile is read, never locked, so
    # decisions on different operations of one provider do not queue behind each other.
    operation = Operation.objects.select_for_update(of=("self",)).select_related("provider").get(pk=operation_id)
    escalation = Escalation.objects.select_for_update().get(pk=escalation_id)
    return operation, escalation


def _clean_comment(comment: object) -> str:
    if not isinstance(comment, str):
        return ""
    return CONTROL_CHARACTERS.sub("", comment).strip()[:COMMENT_MAX]


def _version(card_version: object) -> int | None:
    if isinstance(card_version, int) and not isinstance(card_version, bool):
        return card_version
    if isinstance(card_version, str) and card_version.isascii() and card_version.isdigit() and len(card_version) < 10:
        return int(card_version)
    return None


def _refusal(*, card: Card, user: object, posted_id: str, card_version: object, comment: str) -> str | None:
    if not card.is_open or _version(card_version) != card.escalation.version:
        return STALE
    option = card.option(posted_id)
    if option is None:
        return NOT_OFFERED
    if option.needs_comment and not comment:
        return COMMENT_REQUIRED
    if option.kind is Kind.ACCEPT_OUTPUT and card.awaiting is not None and card.awaiting.user_id == user.pk:  # type: ignore[attr-defined]
        return SAME_RESPONDER
    return None


def _refuse(*, card: Card, user: object, posted_id: str, card_version: object, comment: str, why: str) -> DecideResult:
    """Record a refused attempt: who tried what against which version, and why it was refused.

    The same refusal again soon (same person, card, option, card version and reason, within
    DECISION_REPEAT_WINDOW_S of its last repeat) is counted on the first record instead: no new row,
    no new audit entry; the comment of the first attempt is the one kept.
    """
    escalation = card.escalation
    message = why if why != NOT_OFFERED else f"{NOT_OFFERED}: {_printable(posted_id)[:60] or '(none)'}"
    repeated = _same_refusal(
        card=card, user=user, option=_printable(posted_id)[:100], card_version=card_version, why=why
    )
    if repeated is not None:
        now = card.facts.now
        Decision.objects.filter(pk=repeated.pk).update(repeat_count=F("repeat_count") + 1, last_repeated_at=now)
        repeated.repeat_count += 1
        repeated.last_repeated_at = now
        return DecideResult(decision=repeated, message=message)
    snapshot = card.snapshot()
    snapshot["posted"] = {"option": posted_id[:100], "card_version": str(card_version)[:20]}
    decision = Decision.objects.create(
        escalation=escalation,
        operation=card.operation,
        user=user,
        decided_at=card.facts.now,
        option=_printable(posted_id)[:100],
        outcome=Decision.Outcome.REFUSED,
        refusal_reason=why,
        comment=comment,
        card_version=_version(card_version),
        card_snapshot=snapshot,
    )
    entry = audit.append(
        entry_type="human.refused",
        actor=audit.user_actor(user),
        operation_id=card.operation.pk,
        data={
            "escalation_id": escalation.pk,
            "decision_id": decision.pk,
            "option": decision.option,
            "card_version": decision.card_version,
            "reason": why,
        },
        at=card.facts.now,
    )
    _link_audit(decision, entry.seq)
    return DecideResult(decision=decision, message=message)


def _same_refusal(*, card: Card, user: object, option: str, card_version: object, why: str) -> Decision | None:
    """The latest identical refusal on this card by this person, if it was tried within the window."""
    latest = (
        Decision.objects.filter(
            escalation=card.escalation,
            user=user,
            outcome=Decision.Outcome.REFUSED,
            option=option,
            card_version=_version(card_version),
            refusal_reason=why,
        )
        .order_by("-decided_at", "-pk")
        .first()
    )
    if latest is None:
        return None
    last_seen = latest.last_repeated_at or latest.decided_at
    return latest if card.facts.now - last_seen <= timedelta(seconds=settings.DECISION_REPEAT_WINDOW_S) else None


def _printable(value: str) -> str:
    return CONTROL_CHARACTERS.sub("", value)


def _link_audit(decision: Decision, seq: int) -> None:
    # The entry's seq is known only once appended; the row update rides the same transaction.
    Decision.objects.filter(pk=decision.pk).update(audit_seq=seq)
    decision.audit_seq = seq


def _new_decision(
    *,
    card: Card,
    option: Option,
    user: object,
    comment: str,
    outcome: str,
    snapshot: dict[str, object],
    card_version: int,
    **fields: object,
) -> Decision:
    return Decision.objects.create(
        escalation=card.escalation,
        operation=card.operation,
        user=user,
        decided_at=card.facts.now,
        option=option.id,
        outcome=outcome,
        comment=comment,
        card_version=card_version,
        card_snapshot=snapshot,
        **fields,
    )


def _close_card(escalation: Escalation, *, now: datetime, why: str) -> None:
    escalation.state = Escalation.State.DECIDED
    escalation.closed_at = now
    escalation.closed_reason = why[:300]
    escalation.version += 1
    escalation.save(update_fields=["state", "closed_at", "closed_reason", "version"])


def _audit_decision(*, operation: Operation, decision: Decision, user: object, **data: object) -> None:
    entry = audit.append(
        entry_type="human.decision",
        actor=audit.user_actor(user),
        operation_id=operation.pk,
        data={
            "escalation_id": decision.escalation_id,
            "decision_id": decision.pk,
            "option": decision.option,
            "outcome": decision.outcome,
            "comment": decision.comment or None,
            "card_version": decision.card_version,
            "card_sha256": snapshot_sha256(decision.card_snapshot),
            "state": str(operation.status),
            **data,
        },
        at=decision.decided_at,
    )
    _link_audit(decision, entry.seq)


def _username(user: object) -> str:
    return str(user.get_username())  # type: ignore[attr-defined]


_AUTHORIZATION_KIND = {
    Kind.EXTEND: Authorization.Kind.EXTENSION,
    Kind.TREAT_AS_PENDING: Authorization.Kind.TREAT_AS_PENDING,
    Kind.RETRY_AFTER_ROTATION: Authorization.Kind.RETRY_AFTER_ROTATION,
    Kind.APPROVE_ONE_CHECK: Authorization.Kind.APPROVE_ONE_CHECK,
}


def _apply_extension(*, card: Card, option: Option, user: object, comment: str, now: datetime) -> DecideResult:
    """Options that let polling continue: a new Authorization chained to the previous one.

    extend / treat_as_pending / retry_after_rotation grant the option's bounds; approve_one_check
    keeps the bounds and allows exactly one status request. The operation goes back to running
    with its next poll due at once (or when the provider's pause ends), delay source
    manual_extension, backoff reset, and the fence moved so no older claim can write.
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
        granted_by_label=f"user:{_username(user)}",
        granted_at=now,
        escalation=escalation,
        deadline_at=option.new_deadline_at,
        max_status_requests=option.new_max_requests,
        max_transport_failures=option.new_max_transport_failures or operation.max_transport_failures,
        extra_pending_states=pending,
        comment=comment,
    )
    operation.status = Status.RUNNING
    operation.deadline_at = option.new_deadline_at
    operation.max_status_requests = option.new_max_requests
    operation.max_transport_failures = authorization.max_transport_failures
    operation.extra_pending_states = pending
    operation.next_poll_at = option.next_poll_at or now
    operation.delay_source = DelaySource.MANUAL_EXTENSION
    operation.backoff_attempt = 0
    # An approval is for the check it was asked for: one left unused (the operation stopped for
    # another reason first) must not let a later extension send a request nobody approved.
    operation.approved_checks = 1 if option.kind is Kind.APPROVE_ONE_CHECK else 0
    _release_claim(operation)
    operation.sequence += 1
    operation.updated_at = now
    operation.save()
    _close_card(escalation, now=now, why=f"{option.label} — by {_username(user)}")
    decision = _new_decision(
        card=card,
        option=option,
        user=user,
        comment=comment,
        outcome=Decision.Outcome.APPLIED,
        snapshot=snapshot,
        card_version=version,
        new_deadline_at=option.new_deadline_at,
        new_max_status_requests=option.new_max_requests,
        authorization=authorization,
    )
    _audit_decision(
        operation=operation,
        decision=decision,
        user=user,
        new_deadline=audit.iso(option.new_deadline_at),
        new_max_requests=option.new_max_requests,
        authorization_number=authorization.number,
        next_poll_at=audit.iso(operation.next_poll_at),
        pending_state=added_state,
    )
    return DecideResult(decision=decision, message=f"{option.label}: {option.effect}.")


def _release_claim(operation: Operation) -> None:
    # A new fence: any claim or in-flight poll from before the decision can no longer write.
    operation.fence += 1
    operation.lease_owner, operation.lease_expires_at, operation.claimed_at = "", None, None
    operation.claim_due_at = None


def _apply_inspect(*, card: Card, option: Option, user: object, comment: str, now: datetime) -> DecideResult:
    """Record who looked and when; the card stays open and its version does not move."""
    decision = _new_decision(
        card=card,
        option=option,
        user=user,
        comment=comment,
        outcome=Decision.Outcome.RECORDED,
        snapshot=card.snapshot(),
        card_version=card.escalation.version,
    )
    entry = audit.append(
        entry_type="human.inspect",
        actor=audit.user_actor(user),
        operation_id=card.operation.pk,
        data={
            "escalation_id": card.escalation.pk,
            "decision_id": decision.pk,
            "card_version": decision.card_version,
            "console_url": card.console_url or None,
        },
        at=now,
    )
    _link_audit(decision, entry.seq)
    return DecideResult(
        decision=decision, message="Recorded that you inspected this job.", redirect_url=card.console_url
    )


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
    record_event(operation=operation, event_type="operation.completed")


def _apply_close(*, card: Card, option: Option, user: object, comment: str, now: datetime) -> DecideResult:
    operation, escalation = card.operation, card.escalation
    snapshot, version = card.snapshot(), escalation.version
    message = f"Closed by {_username(user)} after “{card.reason_label}”"
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
    _close_card(escalation, now=now, why=f"closed by {_username(user)}")
    decision = _new_decision(
        card=card,
        option=option,
        user=user,
        comment=comment,
        outcome=Decision.Outcome.APPLIED,
        snapshot=snapshot,
        card_version=version,
    )
    _audit_decision(operation=operation, decision=decision, user=user)
    return DecideResult(decision=decision, message="Closed: pollerdash stopped watching this operation.")


def _apply_accept_output(*, card: Card, option: Option, user: object, comment: str, now: datetime) -> DecideResult:
    """Four eyes: the first responder's acceptance waits; a second, different one applies it."""
    operation, escalation, first = card.operation, card.escalation, card.awaiting
    snapshot, version = card.snapshot(), escalation.version
    if first is None:
        # The card now shows who accepted and waits for a second person: a new version.
        escalation.version += 1
        escalation.save(update_fields=["version"])
        decision = _new_decision(
            card=card,
            option=option,
            user=user,
            comment=comment,
            outcome=Decision.Outcome.AWAITING_SECOND,
            snapshot=snapshot,
            card_version=version,
        )
        _audit_decision(operation=operation, decision=decision, user=user)
        return DecideResult(
            decision=decision, message="Acceptance recorded; a second, different responder must confirm."
        )
    _finish(
        operation,
        status=Status.SUCCEEDED,
        now=now,
        result={
            "values": {},
            "counts": operation.progress_counts,
            "accepted": {
                "by": [first.username, _username(user)],
                "comments": [first.comment, comment],
                "why_it_stopped": escalation.detail,
                "provider_state": operation.last_provider_state or None,
            },
        },
    )
    _close_card(escalation, now=now, why=f"output accepted by {first.username} and {_username(user)}")
    decision = _new_decision(
        card=card,
        option=option,
        user=user,
        comment=comment,
        outcome=Decision.Outcome.APPLIED,
        snapshot=snapshot,
        card_version=version,
        confirms=first,
    )
    _audit_decision(operation=operation, decision=decision, user=user, confirms_decision_id=first.pk)
    return DecideResult(decision=decision, message="Output accepted by two responders: the operation succeeded.")


@dataclass(frozen=True)
class _Offered:
    operation: Operation
    escalation: Escalation
    card: Card
    option: Option
    now: datetime


def _offered(
    *, operation_id: str, escalation_id: int, user: object, posted_id: str, card_version: object, comment: str
) -> _Offered | DecideResult:
    """Lock the card and check the posted option against it; a refusal is recorded and returned.

    Runs inside the decision's transaction: the locks are held until it commits.
    """
    operation, escalation = _lock(operation_id=operation_id, escalation_id=escalation_id)
    now = timezone.now()
    card = load_card(escalation=escalation, operation=operation, now=now)
    refusal = _refusal(card=card, user=user, posted_id=posted_id, card_version=card_version, comment=comment)
    if refusal is not None:
        return _refuse(
            card=card, user=user, posted_id=posted_id, card_version=card_version, comment=comment, why=refusal
        )
    option = card.option(posted_id)
    assert option is not None
    return _Offered(operation=operation, escalation=escalation, card=card, option=option, now=now)


# --- cancel at the provider: claim, send once outside any transaction, record the answer -----------------


def _cancel_at_provider(
    *, operation_id: str, escalation_id: int, user: object, card_version: object, comment: str
) -> DecideResult:
    posted_id = Kind.CANCEL_AT_PROVIDER.value
    with transaction.atomic():
        offered = _offered(
            operation_id=operation_id,
            escalation_id=escalation_id,
            user=user,
            posted_id=posted_id,
            card_version=card_version,
            comment=comment,
        )
        if isinstance(offered, DecideResult):
            return offered
        card, option, now = offered.card, offered.option, offered.now
        operation, escalation = offered.operation, offered.escalation
        decision = _new_decision(
            card=card,
            option=option,
            user=user,
            comment=comment,
            outcome=Decision.Outcome.APPLIED,
            snapshot=card.snapshot(),
            card_version=escalation.version,
        )
        # The claim: once committed, the option is gone from the card and the version moved, so a
        # second click (or a second responder) can never send the cancel again.
        escalation.cancel_response = {
            "state": "sending",
            "decision_id": decision.pk,
            "by": _username(user),
            "sent_at": rfc3339(now),
        }
        escalation.version += 1
        escalation.save(update_fields=["cancel_response", "version"])
        operation.cancel_requested_at = now
        operation.cancel_reason = (comment or f"cancel_at_provider by {_username(user)}")[:280]
        operation.cancel_state = "requested"
        operation.save(update_fields=["cancel_requested_at", "cancel_reason", "cancel_state"])
        _audit_decision(operation=operation, decision=decision, user=user)
    result = send_provider_cancel(operation=operation)
    return _record_cancel_response(
        operation_id=operation_id, escalation_id=escalation_id, decision=decision, user=user, result=result
    )


def _record_cancel_response(
    *, operation_id: str, escalation_id: int, decision: Decision, user: object, result: CancelResult
) -> DecideResult:
    """The provider's answer: the operation ends cancelled only when the provider confirmed."""
    with transaction.atomic():
        operation, escalation = _lock(operation_id=operation_id, escalation_id=escalation_id)
        now = timezone.now()
        record = {**result.as_record(), "received_at": rfc3339(now)}
        Decision.objects.filter(pk=decision.pk).update(provider_response=record)
        decision.provider_response = record
        escalation.cancel_response = {**(escalation.cancel_response or {}), **record}
        escalation.version += 1
        fields = ["cancel_response", "version"]
        operation.cancel_state = result.state
        operation.save(update_fields=["cancel_state"])
        confirmed = result.confirmed and operation.status == Status.NEEDS_ATTENTION
        if confirmed:
            _finish(
                operation,
                status=Status.CANCELLED,
                now=now,
                error={
                    "code": "cancelled_at_provider",
                    "message": (
                        f"Cancelled at the provider on {_username(user)}'s decision; "
                        f"the provider confirmed state {result.provider_state!r}"
                    ),
                    "provider_error": None,
                },
            )
            if escalation.state == Escalation.State.OPEN:
                escalation.state = Escalation.State.DECIDED
                escalation.closed_at = now
                escalation.closed_reason = f"cancelled at the provider by {_username(user)}"[:300]
                fields += ["state", "closed_at", "closed_reason"]
        escalation.save(update_fields=fields)
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
    if confirmed:
        message = "The provider confirmed the cancel: the operation is cancelled."
    elif result.state == "not_forwarded":
        message = (
            "Cancel not sent: another live operation watches this job, and the cancel would end its job too. "
            "The card stays open."
        )
    else:
        answer = describe_cancel(record=result.as_record())
        message = f"Cancel sent; the provider answered {answer}. The card stays open."
    return DecideResult(decision=decision, message=message)


def describe_cancel(*, record: dict) -> str:
    """The provider's answer to a cancel in words, for messages and the card."""
    parts = [str(record.get("state", "")).replace("_", " ")]
    if record.get("http_status") is not None:
        parts.append(f"HTTP {record['http_status']}")
    if record.get("provider_state"):
        parts.append(f"state “{record['provider_state']}”")
    if record.get("detail"):
        parts.append(str(record["detail"])[:120])
    return ", ".join(parts)
