"""The Decision row of a responder's act and its audit entry, linked to each other (written in the
caller's transaction, the entry last). operations.lifecycle.humans and .cancels write through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from operations.audit import entries as audit
from operations.cards.card import Card, snapshot_sha256
from operations.cards.signin import SignIn
from operations.models import Decision
from operations.vocabulary import CONTROL_CHARACTERS, Channel, checked_channel

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def printable(*, value: str) -> str:
    return CONTROL_CHARACTERS.sub("", value)


@dataclass(frozen=True)
class Act:
    """Who acts on which card, as it was shown, and through which channel: what every Decision of the
    act records. The snapshot and version are taken before anything changes."""

    card: Card
    user: User
    sign_in: SignIn | None
    comment: str
    snapshot: dict[str, object]
    card_version: int | None
    channel: Channel = Channel.WEB
    channel_identity: str = ""


def act_on(
    *,
    card: Card,
    user: User,
    sign_in: SignIn | None,
    comment: str,
    channel: str = Channel.WEB,
    channel_identity: str = "",
) -> Act:
    known, identity = checked_channel(channel=channel, identity=channel_identity)
    return Act(
        card=card,
        user=user,
        sign_in=sign_in,
        comment=comment,
        snapshot=card.snapshot(),
        card_version=card.escalation.version,
        channel=known,
        channel_identity=identity,
    )


def record(
    *,
    act: Act,
    option_id: str,
    outcome: str,
    entry_type: str = "human.decision",
    data: dict[str, object] | None = None,
    **fields: object,
) -> Decision:
    """The Decision row and its audit entry (last in the transaction), linked to each other."""
    decision = decision_row(act=act, option_id=option_id, outcome=outcome, **fields)
    decision_entry(decision=decision, user=act.user, entry_type=entry_type, data=data)
    return decision


def decision_row(*, act: Act, option_id: str, outcome: str, **fields: object) -> Decision:
    return Decision.objects.create(
        escalation=act.card.escalation,
        operation=act.card.operation,
        user=act.user,
        decided_at=act.card.facts.now,
        option=option_id,
        outcome=outcome,
        comment=act.comment,
        card_version=act.card_version,
        card_snapshot=act.snapshot,
        authentication=None if act.sign_in is None else act.sign_in.as_record(),
        channel=act.channel,
        channel_identity=act.channel_identity,
        **fields,
    )


def decision_entry(
    *, decision: Decision, user: User, entry_type: str = "human.decision", data: dict[str, object] | None = None
) -> None:
    base: dict[str, object] = {
        "escalation_id": decision.escalation_id,
        "decision_id": decision.pk,
        "authentication": decision.authentication,
        "channel": str(decision.channel),
        "channel_identity": decision.channel_identity or None,
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
