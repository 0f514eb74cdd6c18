"""One option applied to selected cards of a group at once (docs/DESIGN.md section 7, "Groups").

The request is checked whole first: every card named must exist, belong to the group, be open, and
not be held by someone else (their "I'm on it" stands until they give the card back or someone
takes it over on the card itself; one acknowledged after this check is refused under its lock); at
most BULK_MAX cards; the confirmation must state the count of cards named; the option must be one
that is decided in bulk. Anything wrong refuses the whole request with every reason, recorded (a
BulkDecision row and its `human.bulk_decision` entry), and nothing is applied.

Then each member is decided on its own, exactly as a single decision (operations.decisions.services):
its options computed by the server under its locks, the option applied only where it is offered at
the version the person saw; a member that does not offer it gets a recorded refusal. Each member
applied has its own Decision, Authorization and audit entry under the same comment. The members are
decided in one transaction, their operations and cards locked up front in primary-key order: the
bulk is written whole or not at all (a crash midway leaves no half-applied bulk), and 100 cards
cost one commit, not 100. The whole counts as one POST against DECISIONS_PER_MINUTE.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from operations.cards.card import Card, load_cards
from operations.cards.options import Kind, Option, parse_option_id
from operations.cards.signin import SignIn
from operations.decisions.check import Refused, check_decision, clean_comment, fresh_sign_in_refusal
from operations.decisions.services import DecideResult, apply_offered, take_decision_slot
from operations.lifecycle import bulk as lifecycle_bulk
from operations.lifecycle import humans
from operations.models import BulkDecision, CardGroup, Escalation, Operation

if TYPE_CHECKING:
    from django.contrib.auth.models import User

BULK_MAX = 100
# Options decided one card at a time: a look at one job's console, and the one cancel request of a
# card (sent to the provider and waited for, card by card).
NOT_IN_BULK = frozenset({Kind.INSPECT, Kind.CANCEL_AT_PROVIDER})

UNKNOWN_CARD = "no such card"
OTHER_GROUP = "a card of another group"
CLOSED = "no longer open"
NOT_BULK = "this option is decided one card at a time, on the card"
NO_CARDS = "no cards selected"
UNREADABLE_SHOWN = 10


@dataclass(frozen=True)
class Member:
    """A card named in a bulk request and the card version the person saw."""

    escalation_id: int
    version: int | None


@dataclass(frozen=True)
class MemberPreview:
    escalation: Escalation
    card: Card
    option: Option | None  # None: this member does not offer the option


@dataclass
class BulkPreview:
    """What a bulk decision would do now: for the confirmation, which writes nothing."""

    group: CardGroup
    option_id: str
    members: list[MemberPreview]
    problems: list[str] = field(default_factory=list)  # reasons the whole would be refused

    @property
    def offered(self) -> list[MemberPreview]:
        return [m for m in self.members if m.option is not None]

    @property
    def not_offered(self) -> list[MemberPreview]:
        return [m for m in self.members if m.option is None]

    @property
    def option(self) -> Option | None:
        return self.offered[0].option if self.offered else None

    @property
    def cost(self) -> str:
        """'12 operations × 4 checks = 48 requests', or what the option does to each."""
        count, option = len(self.offered), self.option
        operations = f"{count} operation{'s' if count != 1 else ''}"
        if option is None:
            return f"no selected operation offers {self.option_id}"
        extra = option.extra_requests or (1 if option.kind is Kind.APPROVE_ONE_CHECK else 0)
        if extra:
            checks = f"{extra} check{'s' if extra != 1 else ''}"
            return f"{operations} × {checks} = {count * extra} request{'s' if count * extra != 1 else ''}"
        return f"{operations}: {option.label}"


@dataclass(frozen=True)
class BulkResult:
    bulk: BulkDecision
    results: list[DecideResult]

    @property
    def refused_whole(self) -> bool:
        return self.bulk.outcome == BulkDecision.Outcome.REFUSED and not self.results

    @property
    def applied(self) -> list[DecideResult]:
        return [r for r in self.results if not r.refused]

    @property
    def refused(self) -> list[dict]:
        return list(self.bulk.refused)


def parse_members(values: Iterable[object]) -> tuple[list[Member], list[str]]:
    """`<card id>:<version>` (or a bare id) per selected card; what cannot be read is a reason."""
    members: list[Member] = []
    problems: list[str] = []
    seen: set[int] = set()
    for value in values:
        text = str(value)[:40]
        card, _, version = text.partition(":")
        if not (card.isascii() and card.isdigit() and len(card) < 19):
            if len(problems) < UNREADABLE_SHOWN:
                problems.append(f"not a card: {text!r}")
            continue
        pk = int(card)
        if pk in seen:
            continue
        seen.add(pk)
        members.append(Member(pk, int(version) if version.isascii() and version.isdigit() and version else None))
    return members, problems


def _whole_problems(*, group: CardGroup, members: list[Member], option_id: str, user: User) -> list[dict]:
    """Every reason the request cannot be applied at all, naming the card where there is one."""
    problems: list[dict] = []
    parsed = parse_option_id(option_id)
    if parsed is None:
        problems.append({"escalation_id": None, "why": f"not an option: {option_id[:60]!r}"})
    elif parsed.kind in NOT_IN_BULK:
        problems.append({"escalation_id": None, "why": f"{parsed.kind.value}: {NOT_BULK}"})
    if not members:
        problems.append({"escalation_id": None, "why": NO_CARDS})
    if len(members) > BULK_MAX:
        problems.append(
            {"escalation_id": None, "why": f"at most {BULK_MAX} cards per bulk decision ({len(members)} named)"}
        )
        return problems
    found = {
        e.pk: e for e in Escalation.objects.select_related("assignee").filter(pk__in=[m.escalation_id for m in members])
    }
    user_id = getattr(user, "pk", None)
    for member in members:
        escalation = found.get(member.escalation_id)
        if escalation is None:
            why = UNKNOWN_CARD
        elif escalation.group_id != group.pk:
            why = OTHER_GROUP
        elif escalation.state != Escalation.State.OPEN:
            why = f"{CLOSED} ({escalation.state})"
        elif escalation.assignee_id not in (None, user_id):
            # assignee_id is set, so the assignee is there (mypy does not tie the two fields).
            why = held_by(escalation.assignee.get_username())  # type: ignore[union-attr]
        else:
            continue
        problems.append({"escalation_id": member.escalation_id, "why": why})
    return problems


def held_by(holder: str) -> str:
    return f"held by {holder}: take it over on the card, or leave it out"


def preview_bulk(*, group: CardGroup, members: list[Member], option_id: str, user: User) -> BulkPreview:
    """The confirmation of a bulk decision: each selected member's options as they are now."""
    problems = [
        f"card {p['escalation_id']}: {p['why']}" if p["escalation_id"] else p["why"]
        for p in _whole_problems(group=group, members=members, option_id=option_id, user=user)
    ]
    if len(members) > BULK_MAX:
        return BulkPreview(group=group, option_id=option_id, members=[], problems=problems)
    escalations = list(
        Escalation.objects.select_related("operation__provider", "assignee")
        .filter(pk__in=[m.escalation_id for m in members], group=group, state=Escalation.State.OPEN)
        .order_by("opened_at", "pk")
    )
    cards = load_cards(escalations=escalations, now=timezone.now())
    previews = [
        MemberPreview(escalation=e, card=cards[e.pk], option=cards[e.pk].option(option_id)) for e in escalations
    ]
    return BulkPreview(group=group, option_id=option_id, members=previews, problems=problems)


def decide_bulk(
    *,
    group_id: int,
    user: User,
    sign_in: SignIn | None,
    option_id: object,
    members: list[Member],
    comment: object = "",
    confirmed_count: object = None,
    unreadable: list[str] | None = None,
) -> BulkResult:
    """Apply `option_id` to the named members of the group, or refuse the whole and record why.

    A bulk decision needs a recent sign-in whatever its option (`fresh_sign_in_refusal`, the rule
    single decisions that cannot be undone follow): without one the whole is refused and nothing is
    touched. Raises TooManyDecisions beyond DECISIONS_PER_MINUTE (the whole request is one decision
    POST) and CardGroup.DoesNotExist for an unknown group.
    """
    take_decision_slot(user)
    group = CardGroup.objects.get(pk=group_id)
    posted = option_id if isinstance(option_id, str) else ""
    text = clean_comment(comment)
    problems = _request_problems(
        group=group,
        members=members,
        option_id=posted,
        user=user,
        confirmed_count=confirmed_count,
        unreadable=unreadable or [],
    )
    now = timezone.now()
    stale_sign_in = fresh_sign_in_refusal(sign_in=sign_in, now=now)
    if stale_sign_in is not None:
        problems.append({"escalation_id": None, "why": stale_sign_in})
    if problems:
        refusal = lifecycle_bulk.close_bulk(
            group=group,
            user=user,
            option=posted[:100],
            option_label="",
            comment=text,
            requested=len(members),
            applied=[],
            refused=problems,
            now=now,
        )
        return BulkResult(bulk=refusal, results=[])
    return _decide_members(
        group=group, user=user, sign_in=sign_in, option_id=posted, comment=text, members=members, now=now
    )


def _request_problems(
    *,
    group: CardGroup,
    members: list[Member],
    option_id: str,
    user: User,
    confirmed_count: object,
    unreadable: list[str],
) -> list[dict]:
    """What refuses the whole request before any card is looked at: unreadable members, the group's
    and the option's problems, a confirmation for another number of cards."""
    problems: list[dict] = [{"escalation_id": None, "why": why} for why in unreadable]
    problems += _whole_problems(group=group, members=members, option_id=option_id, user=user)
    if str(confirmed_count) != str(len(members)):
        problems.append(
            {
                "escalation_id": None,
                "why": f"the confirmation was for {str(confirmed_count)[:10]} cards, {len(members)} were named",
            }
        )
    return problems


def _decide_members(
    *,
    group: CardGroup,
    user: User,
    sign_in: SignIn | None,
    option_id: str,
    comment: str,
    members: list[Member],
    now: datetime,
) -> BulkResult:
    """The bulk decision opened, each member checked and applied under its own locks, then closed."""
    with transaction.atomic():
        locked = _lock_members(members)
        bulk = lifecycle_bulk.open_bulk(
            group=group, user=user, option=option_id, comment=comment, requested=len(members), now=now
        )
        labels: list[str] = []
        results = [
            _decide_member(
                bulk=bulk,
                member=member,
                locked=locked.get(member.escalation_id),
                user=user,
                sign_in=sign_in,
                option_id=option_id,
                comment=comment,
                labels=labels,
            )
            for member in members
        ]
        lifecycle_bulk.link_members(decisions=[r.decision for r in results], bulk=bulk)
        applied = [r.decision.escalation_id for r in results if not r.refused]
        refused = [{"escalation_id": r.decision.escalation_id, "why": r.message} for r in results if r.refused]
        closed = lifecycle_bulk.close_bulk(
            group=group,
            user=user,
            option=option_id,
            option_label=labels[0] if labels else "",
            comment=comment,
            requested=len(members),
            applied=applied,
            refused=refused,
            now=timezone.now(),
            bulk=bulk,
        )
    return BulkResult(bulk=closed, results=results)


def _lock_members(members: list[Member]) -> dict[int, tuple[Operation, Escalation]]:
    """Lock every member's operation, then every member's card, each in primary-key order (the
    lifecycle's lock order, and the poll path's order for groups of operations, so a bulk decision
    and a group of polls cannot deadlock). Returns each card's locked rows, as `lock_card` would."""
    operation_ids = set(
        Escalation.objects.filter(pk__in=[m.escalation_id for m in members]).values_list("operation_id", flat=True)
    )
    operations = {
        op.pk: op
        for op in Operation.objects.select_for_update(of=("self",))
        .select_related("provider")
        .filter(pk__in=operation_ids)
        .order_by("pk")
    }
    locked: dict[int, tuple[Operation, Escalation]] = {}
    for escalation in (
        Escalation.objects.select_for_update().filter(pk__in=[m.escalation_id for m in members]).order_by("pk")
    ):
        operation = operations[escalation.operation_id]
        escalation.operation = operation
        locked[escalation.pk] = (operation, escalation)
    return locked


def _decide_member(
    *,
    bulk: BulkDecision,
    member: Member,
    locked: tuple[Operation, Escalation] | None,
    user: User,
    sign_in: SignIn | None,
    option_id: str,
    comment: str,
    labels: list[str],
) -> DecideResult:
    """One member, decided as a single decision would be, inside the bulk's transaction (its rows
    already locked). The label of the option applied is added to `labels` (the bulk's record names it)."""
    if locked is None:  # the card vanished since the whole was checked (its operation archived)
        raise Escalation.DoesNotExist(member.escalation_id)
    checked = check_decision(
        operation_id=locked[0].pk,
        locked=locked,
        escalation_id=member.escalation_id,
        user=user,
        sign_in=sign_in,
        posted_id=option_id,
        card_version=member.version,
        comment=comment,
    )
    holder = locked[1].assignee
    if holder is not None and holder.pk != getattr(user, "pk", None) and not isinstance(checked, Refused):
        # Acknowledged by someone else since the whole was checked: read again under the lock, and
        # their "I'm on it" stands, as it does when the request is checked.
        checked = Refused(card=checked.card, why=held_by(holder.get_username()))
    if isinstance(checked, Refused):
        decision = humans.refuse(
            card=checked.card,
            user=user,
            sign_in=sign_in,
            posted_id=option_id,
            posted_version=member.version,
            version=member.version,
            comment=comment,
            why=checked.why,
        )
        result = DecideResult(decision=decision, message=checked.why)
    else:
        result = apply_offered(checked, user=user, sign_in=sign_in, comment=comment)
        labels.append(checked.option.label)
    return result
