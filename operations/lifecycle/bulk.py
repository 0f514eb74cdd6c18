"""The record of a bulk decision over a group's cards (operations.decisions.bulk checks and drives it).

A bulk decision is written in the bulk's one transaction: `open_bulk` before the members,
`link_members` once the members are decided, and `close_bulk` after them with the
`human.bulk_decision` entry (its last write). A request refused whole is only `close_bulk`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from operations.audit import entries as audit
from operations.models import BulkDecision, CardGroup, Decision

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# A refusal lists at most this many reasons (a bulk names at most 100 cards; a few reasons more
# can concern the whole request).
REFUSALS_KEPT = 110


def open_bulk(
    *, group: CardGroup, user: User, option: str, comment: str, requested: int, now: datetime
) -> BulkDecision:
    """The bulk's row, before any member is decided (so each member's Decision can name it)."""
    with transaction.atomic():
        return _new_bulk(
            group=group,
            user=user,
            option=option,
            comment=comment,
            requested=requested,
            now=now,
            outcome=BulkDecision.Outcome.APPLIED,
        )


def _new_bulk(
    *, group: CardGroup, user: User, option: str, comment: str, requested: int, now: datetime, outcome: str
) -> BulkDecision:
    return BulkDecision.objects.create(
        group=group,
        user=user,
        username=user.get_username(),
        decided_at=now,
        option=option,
        comment=comment,
        outcome=outcome,
        requested=requested,
    )


def link_members(*, decisions: list[Decision], bulk: BulkDecision) -> None:
    """Mark the members' Decisions (applied or refused) as part of the bulk, in one statement."""
    Decision.objects.filter(pk__in=[d.pk for d in decisions]).update(bulk=bulk)
    for decision in decisions:
        decision.bulk = bulk


def close_bulk(
    *,
    group: CardGroup,
    user: User,
    option: str,
    option_label: str,
    comment: str,
    requested: int,
    applied: list[int],
    refused: list[dict[str, Any]],
    now: datetime,
    bulk: BulkDecision | None = None,
) -> BulkDecision:
    """What the bulk did (or why it was refused whole) and its `human.bulk_decision` entry.

    `refused`: {"escalation_id": int | None, "why": str} per member refused or per reason the whole
    request was. Without `bulk` (refused whole) the row is created here.
    """
    outcome = BulkDecision.Outcome.APPLIED if applied else BulkDecision.Outcome.REFUSED
    with transaction.atomic():
        if bulk is None:
            bulk = _new_bulk(
                group=group, user=user, option=option, comment=comment, requested=requested, now=now, outcome=outcome
            )
        bulk.outcome, bulk.applied, bulk.refused = outcome, len(applied), refused[:REFUSALS_KEPT]
        bulk.option_label = option_label[:200]
        bulk.save(update_fields=["outcome", "applied", "refused", "option_label"])
        entry = audit.append(
            entry_type="human.bulk_decision",
            actor=audit.user_actor(user),
            operation_id=None,
            data={
                "group_id": group.pk,
                "bulk_id": bulk.pk,
                "option": option,
                "outcome": outcome,
                "comment": comment or None,
                "requested": requested,
                "applied": len(applied),
                "applied_escalation_ids": applied,
                "refused": [{"escalation_id": r["escalation_id"], "reason": r["why"]} for r in bulk.refused],
            },
            at=now,
        )
        # The entry's seq is known only once appended; the row update rides the same transaction.
        BulkDecision.objects.filter(pk=bulk.pk).update(audit_entry_id=entry.pk)
        bulk.audit_entry_id = entry.pk
    return bulk
