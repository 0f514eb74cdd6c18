"""Checking a decision before anything is written (the `check_*` half of Zulip's check/do split).

The operation row, then the card row, are locked (the lock order of the lifecycle), the card is
loaded from the locked rows, and the posted option is compared with the options the server
computes now, never with what the browser posted. The result is either what to apply or why not.

Options that cannot be undone (cancel at the provider, close, accept output), and bulk decisions,
also need a recent sign-in (`fresh_sign_in_refusal`): a session left open on a desk does not let
anyone end a job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils import timezone

from operations.cards.card import Card, load_card
from operations.cards.options import Kind, Option

# The refusal reasons live with the words that name them (words.outcome_words).
from operations.cards.signin import SignIn, is_fresh
from operations.cards.words import COMMENT_REQUIRED, NOT_OFFERED, SAME_RESPONDER, SIGN_IN_AGAIN, STALE
from operations.models import Escalation, Operation
from operations.vocabulary import CONTROL_CHARACTERS

if TYPE_CHECKING:
    from django.contrib.auth.models import User

COMMENT_MAX = 2000
# The options that cannot be undone: each needs a sign-in within FRESH_SIGN_IN_MINUTES.
FRESH_SIGN_IN_KINDS = frozenset({Kind.CANCEL_AT_PROVIDER, Kind.CLOSE, Kind.ACCEPT_OUTPUT})


@dataclass(frozen=True)
class Offered:
    """The option may be applied: the card as shown under the locks, and when."""

    card: Card
    option: Option
    now: datetime


@dataclass(frozen=True)
class Refused:
    card: Card
    why: str


def clean_comment(comment: object) -> str:
    if not isinstance(comment, str):
        return ""
    return CONTROL_CHARACTERS.sub("", comment).strip()[:COMMENT_MAX]


def posted_version(card_version: object) -> int | None:
    if isinstance(card_version, int) and not isinstance(card_version, bool):
        return card_version
    if isinstance(card_version, str) and card_version.isascii() and card_version.isdigit() and len(card_version) < 10:
        return int(card_version)
    return None


def fresh_sign_in_max_age() -> timedelta:
    return timedelta(minutes=settings.FRESH_SIGN_IN_MINUTES)


def fresh_sign_in_refusal(*, sign_in: SignIn | None, now: datetime) -> str | None:
    """Why a decision that cannot be undone may not be taken under this sign-in now (None: it may).

    The one freshness rule, for single decisions (`check_decision`, for FRESH_SIGN_IN_KINDS) and
    bulk decisions alike (checked once for the whole batch, before any card is touched)."""
    if is_fresh(sign_in, now=now, max_age=fresh_sign_in_max_age()):
        return None
    return SIGN_IN_AGAIN


def lock_card(*, operation_id: str, escalation_id: int) -> tuple[Operation, Escalation]:
    # Lock the operation row only ("of self"): the provider profile is read, never locked, so
    # decisions on different operations of one provider do not queue behind each other.
    operation = Operation.objects.select_for_update(of=("self",)).select_related("provider").get(pk=operation_id)
    escalation = Escalation.objects.select_for_update().get(pk=escalation_id)
    if escalation.operation_id == operation.pk:
        # What the lifecycle and the card's event receivers read through `escalation.operation` is
        # then the row just locked, not a second, unlocked copy loaded on first access.
        escalation.operation = operation
    return operation, escalation


def check_decision(
    *,
    operation_id: str,
    escalation_id: int,
    user: User,
    sign_in: SignIn | None,
    posted_id: str,
    card_version: object,
    comment: str,
    locked: tuple[Operation, Escalation] | None = None,
) -> Offered | Refused:
    """Lock the card and check the posted option against it, under the decider's sign-in. Call inside
    the decision's transaction: the locks are held until it commits. `locked`: the rows, already
    locked in this transaction (a bulk decision locks all its members up front)."""
    operation, escalation = locked or lock_card(operation_id=operation_id, escalation_id=escalation_id)
    now = timezone.now()
    card = load_card(escalation=escalation, operation=operation, now=now)
    if not card.is_open or posted_version(card_version) != escalation.version:
        return Refused(card=card, why=STALE)
    option = card.option(posted_id)
    if option is None:
        return Refused(card=card, why=NOT_OFFERED)
    if option.kind in FRESH_SIGN_IN_KINDS:
        stale_sign_in = fresh_sign_in_refusal(sign_in=sign_in, now=now)
        if stale_sign_in is not None:
            return Refused(card=card, why=stale_sign_in)
    if option.needs_comment and not comment:
        return Refused(card=card, why=COMMENT_REQUIRED)
    if option.kind is Kind.ACCEPT_OUTPUT and card.awaiting is not None and card.awaiting.user_id == user.pk:
        return Refused(card=card, why=SAME_RESPONDER)
    return Offered(card=card, option=option, now=now)
