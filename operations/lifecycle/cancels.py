"""The one provider cancel of a card, written: claimed (a Decision, the card's version moved) before
it is sent, then the provider's answer recorded; the operation ends cancelled only when the
provider confirmed (operations.decisions.services sends it between the two, holding no lock)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.utils import timezone

from operations.audit import entries as audit
from operations.cards.card import Card
from operations.cards.options import Option
from operations.cards.signin import SignIn
from operations.lifecycle.cards import close_card, new_card_version
from operations.lifecycle.decision_records import act_on, decision_entry, decision_row
from operations.lifecycle.humans import finish
from operations.models import Decision, Escalation, Operation
from operations.providers.cancel import CancelResult
from operations.representation import rfc3339
from operations.vocabulary import CancelState, Status

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def claim_cancel(
    *,
    card: Card,
    option: Option,
    user: User,
    sign_in: SignIn | None,
    comment: str,
    now: datetime,
    channel: str = "web",
    channel_identity: str = "",
) -> Decision:
    """The one cancel request of a card, claimed before it is sent.

    Once committed, the option is gone from the card and the version moved, so a second click (or a
    second responder) can never send the cancel again.
    """
    operation, escalation = card.operation, card.escalation
    act = act_on(
        card=card, user=user, sign_in=sign_in, comment=comment, channel=channel, channel_identity=channel_identity
    )
    decision = decision_row(act=act, option_id=option.id, outcome=Decision.Outcome.APPLIED)
    escalation.cancel_response = {
        "state": "sending",
        "decision_id": decision.pk,
        "by": user.get_username(),
        "sent_at": rfc3339(now),
    }
    escalation.save(update_fields=["cancel_response"])
    new_card_version(escalation=escalation)
    operation.cancel_requested_at = now
    # The agent reads it (its Operation's `cancel.reason`): the option's words, not its id.
    operation.cancel_reason = (comment or f"{option.label} — by {user.get_username()}")[:280]
    operation.cancel_state = CancelState.REQUESTED
    operation.save(update_fields=["cancel_requested_at", "cancel_reason", "cancel_state"])
    decision_entry(decision=decision, user=user)
    return decision


def record_cancel_answer(
    *, operation: Operation, escalation: Escalation, decision: Decision, user: User, result: CancelResult
) -> bool:
    """The provider's answer to the card's cancel; the operation ends cancelled only when the provider
    confirmed. Call with the operation and card locked. Returns whether it ended cancelled."""
    now = timezone.now()
    _keep_cancel_answer(operation=operation, escalation=escalation, decision=decision, result=result, now=now)
    confirmed = result.confirmed and operation.status == Status.NEEDS_ATTENTION
    if confirmed:
        finish(
            operation=operation,
            status=Status.CANCELLED,
            now=now,
            error={
                "code": "cancelled_at_provider",
                "message": (
                    f"Cancelled at the provider on {user.get_username()}'s decision; "
                    f"the provider confirmed state {result.provider_state!r}"
                ),
                "provider_error": None,
            },
        )
    if confirmed and escalation.state == Escalation.State.OPEN:
        close_card(
            escalation=escalation,
            now=now,
            why=f"cancelled at the provider by {user.get_username()}",
            channel=decision.channel,
        )
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


def _keep_cancel_answer(
    *, operation: Operation, escalation: Escalation, decision: Decision, result: CancelResult, now: datetime
) -> None:
    """The answer kept on the decision and the card, and the cancel's state (and the provider's
    latest word on the job) on the operation."""
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
