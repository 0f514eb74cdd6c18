"""A group of cards (one outage) as its page shows it: the open members a page at a time, each with its
own options, and what a bulk decision over them could apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.core.paginator import Page, Paginator
from django.db.models import Count, F

from escalations.selectors.paging import page_number
from operations.cards.card import Card, load_cards, reason_label
from operations.cards.options import Confirm
from operations.decisions.bulk import BULK_MAX, NOT_IN_BULK
from operations.models import BulkDecision, CardGroup, Escalation

# One page of members is at most one bulk decision.
MEMBERS_PER_PAGE = BULK_MAX
RECENT_BULK = 5


@dataclass(frozen=True)
class GroupOption:
    """An option some members of the page offer, and how many."""

    id: str
    label: str
    effect: str
    explicit: bool
    offered: int


@dataclass
class GroupView:
    group: CardGroup
    open_count: int
    closed_count: int
    page: Page
    cards: dict[int, Card]
    options: list[GroupOption]
    recent_bulk: list[BulkDecision] = field(default_factory=list)

    @property
    def label(self) -> str:
        # The outage's size, whatever has been decided since: deciding cards does not rename it.
        count, reason = self.open_count + self.closed_count, reason_label(self.group.reason)
        return f"{count} operation{'s' if count != 1 else ''}: {reason} on {self.group.account}"

    @property
    def members(self) -> list[tuple[Escalation, Card]]:
        return [(escalation, self.cards[escalation.pk]) for escalation in self.page.object_list]


def group_view(*, group_id: int, page: object, now: datetime) -> GroupView | None:
    """The group's page: counts, one page of open members with their cards, options across them."""
    group = CardGroup.objects.filter(pk=group_id).first()
    if group is None:
        return None
    by_state = Escalation.objects.filter(group=group).values("state").annotate(n=Count("id"))
    counts = dict(by_state.values_list("state", "n"))
    open_count = counts.get(Escalation.State.OPEN, 0)
    members = (
        Escalation.objects.filter(group=group, state=Escalation.State.OPEN)
        .select_related("operation__provider", "assignee", "acknowledged_by")
        .order_by(F("operation__business_deadline_at").asc(nulls_last=True), "opened_at", "pk")
    )
    paginator = Paginator(members, MEMBERS_PER_PAGE)
    paginator.__dict__["count"] = open_count  # known from the counts above
    page_obj = paginator.get_page(page_number(page))
    escalations = list(page_obj.object_list)
    page_obj.object_list = escalations
    cards = load_cards(escalations=escalations, now=now)
    return GroupView(
        group=group,
        open_count=open_count,
        closed_count=sum(n for state, n in counts.items() if state != Escalation.State.OPEN),
        page=page_obj,
        cards=cards,
        options=_options(list(cards.values())),
        recent_bulk=list(BulkDecision.objects.filter(group=group).order_by("-decided_at", "-pk")[:RECENT_BULK]),
    )


def _options(cards: list[Card]) -> list[GroupOption]:
    """Every option a member offers that can be decided in bulk, in the order the cards list them."""
    seen: dict[str, GroupOption] = {}
    for card in cards:
        for option in card.options:
            if option.kind in NOT_IN_BULK:
                continue
            known = seen.get(option.id)
            seen[option.id] = GroupOption(
                id=option.id,
                label=option.label,
                effect=known.effect if known else option.effect,
                explicit=option.confirm is Confirm.EXPLICIT,
                offered=(known.offered if known else 0) + 1,
            )
    return list(seen.values())
