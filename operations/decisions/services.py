"""Deciding on a card: check the posted option under the card's locks, then apply it through the lifecycle.

Every decision runs in one transaction that locks the operation row, then the escalation row, re-reads
the card, and compares the version the responder saw with the current one (operations.decisions.check).
So of two responders clicking at once exactly one decision applies; the other is refused with "state
changed — review again" and that refusal is recorded too (a Decision row with outcome `refused` and a
`human.refused` audit entry). Nothing here runs on a timer: no decision is ever taken by timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from operations.cards.options import Kind, parse_option_id
from operations.cards.signin import SignIn
from operations.decisions.check import (
    NOT_OFFERED,
    SIGN_IN_AGAIN,
    STALE,
    Offered,
    Refused,
    check_decision,
    clean_comment,
    lock_card,
    posted_version,
)
from operations.lifecycle import cancels, grants, humans
from operations.limits import ratelimit
from operations.models import Decision, Escalation
from operations.providers.cancel import send_provider_cancel
from operations.vocabulary import CONTROL_CHARACTERS, CancelState, Channel, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User


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

    @property
    def needs_fresh_sign_in(self) -> bool:
        return self.refused and self.decision.refusal_reason == SIGN_IN_AGAIN


def take_decision_slot(user: User) -> None:
    """Count one decision POST against the person's DECISIONS_PER_MINUTE (a bulk decision is one),
    in the database so it holds across web processes; TooManyDecisions beyond it."""
    if settings.DECISIONS_PER_MINUTE <= 0:
        return
    wait_s = ratelimit.take(
        key=f"decisions:user:{user.pk}",
        limit=settings.DECISIONS_PER_MINUTE,
        window_s=60,
        now=timezone.now(),
    )
    if wait_s is not None:
        raise TooManyDecisions(retry_after_s=wait_s)


def escalation_decide(
    *,
    escalation_id: int,
    user: User,
    sign_in: SignIn | None,
    option_id: object,
    card_version: object,
    comment: object = "",
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> DecideResult:
    """Apply one option of a card for `user`, signed in as `sign_in` says, or refuse it and record the
    refusal. The decision records the sign-in; options that cannot be undone need a recent one.
    `channel` says where the decision came from (web, slack, pagerduty, api) and `channel_identity`
    the identity that channel verified ("slack:T1/U1"); both are recorded on the Decision and its
    audit entry. ValueError for a channel outside the vocabulary.

    Raises TooManyDecisions beyond DECISIONS_PER_MINUTE for this person (counted before anything
    else, in the database so it holds across web processes) and Escalation.DoesNotExist for an
    unknown card. Everything else (stale version, an option or duration the card does not offer, a
    missing comment, a sign-in too old for an option that cannot be undone, the same person
    confirming their own acceptance) is a recorded refusal, returned as a DecideResult.
    """
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    take_decision_slot(user)
    posted = _Posted(
        operation_id=Escalation.objects.values_list("operation_id", flat=True).get(pk=escalation_id),
        escalation_id=escalation_id,
        user=user,
        sign_in=sign_in,
        posted_id=option_id if isinstance(option_id, str) else "",
        card_version=card_version,
        comment=clean_comment(comment),
        channel=known,
        channel_identity=identity,
    )
    parsed = parse_option_id(posted.posted_id)
    if parsed is not None and parsed.kind is Kind.CANCEL_AT_PROVIDER:
        return _cancel_at_provider(posted)
    with transaction.atomic():
        checked = _check_or_refuse(posted)
        if isinstance(checked, DecideResult):
            return checked
        return apply_offered(
            checked,
            user=user,
            sign_in=sign_in,
            comment=posted.comment,
            channel=known,
            channel_identity=identity,
        )


@dataclass(frozen=True)
class _Posted:
    """A decision as posted: who, on which card, which option against which version, with what
    comment, through which channel."""

    operation_id: str
    escalation_id: int
    user: User
    sign_in: SignIn | None
    posted_id: str
    card_version: object
    comment: str
    channel: Channel = Channel.WEB
    channel_identity: str = ""


def _check_or_refuse(posted: _Posted) -> Offered | DecideResult:
    """check_decision in the caller's transaction; a refusal is recorded and comes back as its result."""
    checked = check_decision(
        operation_id=posted.operation_id,
        escalation_id=posted.escalation_id,
        user=posted.user,
        sign_in=posted.sign_in,
        posted_id=posted.posted_id,
        card_version=posted.card_version,
        comment=posted.comment,
    )
    if isinstance(checked, Refused):
        return _refused(
            checked,
            user=posted.user,
            sign_in=posted.sign_in,
            posted_id=posted.posted_id,
            card_version=posted.card_version,
            comment=posted.comment,
            channel=posted.channel,
            channel_identity=posted.channel_identity,
        )
    return checked


def apply_offered(
    offered: Offered,
    *,
    user: User,
    sign_in: SignIn | None,
    comment: str,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> DecideResult:
    """Apply an option `check_decision` found offered, inside its transaction (the locks still held)."""
    card, option, now = offered.card, offered.option, offered.now
    via = {"channel": channel, "channel_identity": channel_identity}
    if option.kind is Kind.INSPECT:
        decision = humans.record_inspect(card=card, option=option, user=user, sign_in=sign_in, comment=comment, **via)
        return DecideResult(
            decision=decision, message="Recorded that you inspected this job.", redirect_url=card.console_url
        )
    if option.kind is Kind.CLOSE:
        decision = humans.close(card=card, option=option, user=user, sign_in=sign_in, comment=comment, now=now, **via)
        return DecideResult(decision=decision, message="Closed: pollerdash stopped watching this operation.")
    if option.kind is Kind.ACCEPT_OUTPUT:
        decision = humans.accept_output(
            card=card, option=option, user=user, sign_in=sign_in, comment=comment, now=now, **via
        )
        if decision.outcome == Decision.Outcome.AWAITING_SECOND:
            message = "Acceptance recorded; a second, different responder must confirm."
        else:
            message = "Output accepted by two responders: the operation succeeded."
        return DecideResult(decision=decision, message=message)
    if option.kind is Kind.KEEP_WAITING:
        decision = grants.keep_waiting(
            card=card, option=option, user=user, sign_in=sign_in, comment=comment, now=now, **via
        )
        return DecideResult(decision=decision, message=f"{option.label}: {option.effect}.")
    decision = grants.grant(card=card, option=option, user=user, sign_in=sign_in, comment=comment, now=now, **via)
    return DecideResult(decision=decision, message=f"{option.label}: {option.effect}.")


def _refused(
    refused: Refused,
    *,
    user: User,
    sign_in: SignIn | None,
    posted_id: str,
    card_version: object,
    comment: str,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> DecideResult:
    decision = humans.refuse(
        card=refused.card,
        user=user,
        sign_in=sign_in,
        posted_id=posted_id,
        posted_version=card_version,
        version=posted_version(card_version),
        comment=comment,
        why=refused.why,
        channel=channel,
        channel_identity=channel_identity,
    )
    message = refused.why
    if refused.why == NOT_OFFERED:
        message = f"{NOT_OFFERED}: {CONTROL_CHARACTERS.sub('', posted_id)[:60] or '(none)'}"
    return DecideResult(decision=decision, message=message)


# --- cancel at the provider: claim, send once outside any transaction, record the answer -----------------


def _cancel_at_provider(posted: _Posted) -> DecideResult:
    user = posted.user
    with transaction.atomic():
        checked = _check_or_refuse(posted)
        if isinstance(checked, DecideResult):
            return checked
        decision = cancels.claim_cancel(
            card=checked.card,
            option=checked.option,
            user=user,
            sign_in=posted.sign_in,
            comment=posted.comment,
            now=checked.now,
            channel=posted.channel,
            channel_identity=posted.channel_identity,
        )
        operation = checked.card.operation
    # No lock is held while the provider answers.
    result = send_provider_cancel(operation=operation)
    with transaction.atomic():
        operation, escalation = lock_card(operation_id=posted.operation_id, escalation_id=posted.escalation_id)
        confirmed = cancels.record_cancel_answer(
            operation=operation, escalation=escalation, decision=decision, user=user, result=result
        )
    if confirmed:
        message = "The provider confirmed the cancel: the operation is cancelled."
    elif result.state is CancelState.NOT_FORWARDED:
        message = (
            "Cancel not sent: another live operation watches this job, and the cancel would end its job too. "
            "The card stays open."
        )
    elif result.state is CancelState.NOT_ALLOWED:
        message = f"Cancel {result.detail}. The card stays open."
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
